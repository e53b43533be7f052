/** The minute `prefix` ("YYYY-MM-DDTHH:MM:") stands for, from its first millisecond (epoch ms). */
let minuteStart = Number.NaN;
let prefix = "";

/** Beyond year 9999 toISOString writes six-digit years: those are left to it. */
const lastFormatted = 253_402_300_800_000;

/**
 * `date.toISOString()`, for the usage row's `created_at`: the date and the minute are formatted
 * once per minute, and each call only appends the seconds and milliseconds. `toISOString` builds a
 * broken-down date per call (~0.5 µs, once per proxied request). Dates before 1970 or after year
 * 9999, and invalid ones, go to `toISOString` itself (which throws for an invalid date).
 */
export function isoTimestamp(date: Date): string {
  const time = date.getTime();
  let intoMinute = time - minuteStart;
  if (!(intoMinute >= 0 && intoMinute < 60_000)) {
    if (!(time >= 0 && time < lastFormatted)) return date.toISOString();
    minuteStart = time - (time % 60_000);
    prefix = new Date(minuteStart).toISOString().slice(0, 17);
    intoMinute = time - minuteStart;
  }
  const seconds = Math.floor(intoMinute / 1000);
  const millis = intoMinute - seconds * 1000;
  return `${prefix}${seconds < 10 ? "0" : ""}${seconds}.${millis < 10 ? "00" : millis < 100 ? "0" : ""}${millis}Z`;
}
