import { mayBeKey } from "./admin/project-id.js";
import { jsonStart, skipSpaces, stringEnd } from "./providers/json-bytes.js";
import { quotedStart } from "./quoted-start.js";

/** An object or array open in the scan, and where in it the scan is: the last member's name, or the element's index. */
interface Level {
  /** The member names met so far; null for an array. */
  names: Set<string> | null;
  /** The names met more than once, each path built once however often it is repeated. */
  repeated?: Set<string>;
  slot: string | number;
}

/** The paths named at most, each cut to its end: a body may nest 10,000 objects of long names. */
const maxRepeatedShown = 10;
const maxPathLength = 200;

/**
 * The path (`deviceCheck.teamId`, an array element by its index: `anyOf.1.type`) of each member
 * that an object of `body` names more than once, each path once, in the order met, the first
 * `maxRepeatedShown` of them (a path over 200 characters as `…` and its end); empty when none.
 * `JSON.parse` keeps the last of such members without a word, where a proxy or a log in front may
 * read the first (RFC 8259 §4: such an object's meaning is unpredictable). A name in the path that
 * may be a key (a provider key pasted as a member's name) is shown by its start and length only. Names are compared as
 * decoded (`"n\u0061me"` is `name`). `body` must be JSON that `JSON.parse` took: one pass over its
 * bytes, strings skipped but for member names. The admin API's bodies, the projects file
 * (SLUICE_CONFIG_FILE) and the CLI's JSON flags each refuse such an object, naming these paths.
 */
export function repeatedMembers(body: Buffer): string[] {
  const levels: Level[] = [];
  const found: string[] = [];
  for (let index = jsonStart(body); index < body.length; index++) {
    const byte = body[index];
    if (byte === 0x22 /* " */) {
      const end = stringEnd(body, index);
      const top = levels.at(-1);
      if (top?.names && body[skipSpaces(body, end)] === 0x3a /* : */) {
        const name = JSON.parse(body.toString("utf8", index, end)) as string;
        if (!top.names.has(name)) top.names.add(name);
        else if (!top.repeated?.has(name)) {
          top.repeated ??= new Set();
          top.repeated.add(name);
          const path = [...levels.slice(0, -1).map((level) => level.slot), name].map(shownSlot).join(".");
          found.push(path.length > maxPathLength ? `…${path.slice(1 - maxPathLength)}` : path);
          if (found.length === maxRepeatedShown) return found;
        }
        top.slot = name;
      }
      index = end - 1;
    } else if (byte === 0x7b /* { */) levels.push({ names: new Set(), slot: "" });
    else if (byte === 0x5b /* [ */) levels.push({ names: null, slot: 0 });
    else if (byte === 0x7d /* } */ || byte === 0x5d /* ] */) levels.pop();
    else if (byte === 0x2c /* , */) {
      const top = levels.at(-1);
      if (top && top.names === null) top.slot = (top.slot as number) + 1;
    }
  }
  return found;
}

/**
 * One problem per member `body` names twice in an object (repeatedMembers), as every input that
 * takes JSON words it: `testMode: is given more than once`, after `prefix` (a CLI flag's name).
 */
export function repeatedMemberProblems(body: Buffer, prefix = ""): string[] {
  return repeatedMembers(body).map((path) => `${prefix}${path}: is given more than once`);
}

/** A step of a path as shown: an index, a name, or the start and length of a name that may be a key. */
function shownSlot(slot: string | number): string | number {
  return typeof slot === "string" && mayBeKey(slot) ? quotedStart(slot) : slot;
}
