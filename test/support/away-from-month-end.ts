/**
 * A gateway clock (`now`, see Injectables) that stays within one calendar month (UTC) for the
 * hour after it is made: the real time, or an hour earlier when the month ends within the hour.
 * A test of the monthly spend cap that ran across the 1st at 00:00 UTC would see the month's
 * spend start again at 0, and a call it expects refused would be admitted.
 */
export function clockAwayFromMonthEnd(marginMs = 60 * 60_000): () => Date {
  const start = new Date();
  const nextMonth = Date.UTC(start.getUTCFullYear(), start.getUTCMonth() + 1, 1);
  const offset = nextMonth - start.getTime() <= marginMs ? marginMs : 0;
  return () => new Date(Date.now() - offset);
}
