const months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const month = `(?<month>${months.join("|")})`;
const time = "(?<hours>\\d\\d):(?<minutes>\\d\\d):(?<seconds>\\d\\d)";
const weekday = "(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)";
/**
 * RFC 9110 section 5.6.7's three forms of an HTTP-date, which a recipient must all accept:
 * `Sun, 06 Nov 1994 08:49:37 GMT`, and the obsolete `Sunday, 06-Nov-94 08:49:37 GMT` and
 * `Sun Nov  6 08:49:37 1994` (UTC too).
 */
const httpDateForms = [
  new RegExp(`^${weekday}, (?<day>\\d\\d) ${month} (?<year>\\d{4}) ${time} GMT$`),
  new RegExp(
    `^(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day, (?<day>\\d\\d)-${month}-(?<year>\\d\\d) ${time} GMT$`,
  ),
  new RegExp(`^${weekday} ${month} (?<day>[ \\d]\\d) ${time} (?<year>\\d{4})$`),
];

/** The instant (ms since the epoch) an HTTP-date names; null for other text or a day that does not exist. */
function httpDate(text: string, now: number): number | null {
  const found = httpDateForms.map((form) => form.exec(text)?.groups).find((groups) => groups !== undefined);
  if (!found) return null;
  const [day, hours, minutes, seconds] = [found.day, found.hours, found.minutes, found.seconds].map(
    Number,
  ) as [number, number, number, number];
  let year = Number(found.year);
  if (found.year?.length === 2) {
    // A two-digit year more than 50 years ahead is the last such year in the past (RFC 9110).
    const thisYear = new Date(now).getUTCFullYear();
    year += thisYear - (thisYear % 100);
    if (year > thisYear + 50) year -= 100;
  }
  const date = new Date(Date.UTC(year, months.indexOf(found.month ?? ""), day, hours, minutes, seconds));
  // The grammar allows a leap second (60); 31 Feb or 25:00 are no instant.
  if (date.getUTCDate() !== day || hours > 23 || minutes > 59 || seconds > 60) return null;
  return date.getTime();
}

/**
 * A Retry-After in whole seconds: delay-seconds or an HTTP-date (RFC 9110 section 10.2.3), a date
 * counted from `now`; at least 1 (a date past or now, or 0) and at most an hour (`boundedWait`).
 * Null for anything else, or none.
 */
export function retryAfterSeconds(value: string | string[] | undefined, now: number): number | null {
  const text = (Array.isArray(value) ? value[0] : value)?.trim();
  if (text === undefined) return null;
  if (/^\d+$/.test(text)) return boundedWait(Number(text));
  const date = httpDate(text, now);
  return date === null ? null : boundedWait(Math.ceil((date - now) / 1000));
}

/** A wait in whole seconds held to 1 second at least and an hour at most. */
export function boundedWait(seconds: number): number {
  return Math.min(3600, Math.max(1, seconds));
}
