import { closeSync, existsSync, openSync } from "node:fs";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createLogDestination, type LogDestinationOptions } from "./log-destination.js";

type Answer = { error: string } | { written: number } | "all";

/** An `fs.write` the test answers: each call waits until `answer` is given its result. */
function fakeFile() {
  const file = { text: "", writes: [] as string[] };
  const pending: Array<{
    data: Uint8Array;
    callback: (error: NodeJS.ErrnoException | null, n: number) => void;
  }> = [];
  const write: LogDestinationOptions["write"] = (_fd, data, callback) => {
    file.writes.push(Buffer.from(data).toString());
    pending.push({ data, callback });
  };
  const answer = (result: Answer) => {
    const call = pending.shift();
    if (!call) throw new Error("no write under way");
    if (typeof result === "object" && "error" in result)
      call.callback(Object.assign(new Error(result.error), { code: result.error }), 0);
    else {
      const written = result === "all" ? call.data.length : result.written;
      file.text += Buffer.from(call.data.subarray(0, written)).toString();
      call.callback(null, written);
    }
  };
  return { file, write, answer, underWay: () => pending.length };
}

function destinationOn(fake: ReturnType<typeof fakeFile>, options: Partial<LogDestinationOptions> = {}) {
  const reports = { dropped: 0, recovered: [] as Array<[number, string]> };
  const destination = createLogDestination({
    fd: 99,
    write: fake.write,
    writeSync: () => {
      throw Object.assign(new Error("ENOSPC"), { code: "ENOSPC" });
    },
    onDropped: (lines) => {
      reports.dropped += lines;
    },
    onRecovered: (dropped, reason) => reports.recovered.push([dropped, reason]),
    ...options,
  });
  return { destination, reports };
}

describe("the log destination", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("writes in the background, one write at a time, joining the lines logged meanwhile", () => {
    const fake = fakeFile();
    const { destination, reports } = destinationOn(fake);
    destination.write("a\n");
    destination.write("b\n");
    destination.write("c\n");
    expect(fake.file.writes).toEqual(["a\n"]);
    fake.answer("all");
    expect(fake.file.writes).toEqual(["a\n", "b\nc\n"]);
    fake.answer("all");
    expect(fake.file.text).toBe("a\nb\nc\n");
    expect(fake.underWay()).toBe(0);
    expect(reports).toEqual({ dropped: 0, recovered: [] });
  });

  it("writes the rest of a partial write", () => {
    const fake = fakeFile();
    const { destination } = destinationOn(fake);
    destination.write("hello\n");
    fake.answer({ written: 2 });
    fake.answer("all");
    expect(fake.file.writes).toEqual(["hello\n", "llo\n"]);
    expect(fake.file.text).toBe("hello\n");
  });

  it.each(["ENOSPC", "EPIPE", "EIO", "EBADF"])(
    "drops and counts the lines a write refuses with %s, never retries them, and says so once writes work again",
    (code) => {
      const fake = fakeFile();
      const { destination, reports } = destinationOn(fake);
      destination.write("one\n");
      destination.write("two\n");
      destination.write("three\n");
      fake.answer({ error: code });
      // The next chunk is tried: the destination may take it.
      expect(fake.file.writes).toEqual(["one\n", "two\nthree\n"]);
      fake.answer({ error: code });
      expect(fake.underWay()).toBe(0);
      expect(reports.dropped).toBe(3);
      destination.write("four\n");
      expect(fake.file.writes.at(-1)).toBe("four\n");
      fake.answer("all");
      expect(fake.file.text).toBe("four\n");
      expect(reports.recovered).toEqual([[3, code]]);
      expect(destination.unreported().dropped).toBe(0);
    },
  );

  it("starts a new line after dropping the rest of one cut short by a full disk", () => {
    const fake = fakeFile();
    const { destination, reports } = destinationOn(fake);
    destination.write("first line\n");
    fake.answer({ written: 5 });
    fake.answer({ error: "ENOSPC" });
    destination.write("second\n");
    fake.answer("all");
    expect(fake.file.text).toBe("first\nsecond\n");
    expect(reports.recovered).toEqual([[1, "ENOSPC"]]);
  });

  it("waits out EAGAIN (a busy pipe), holding lines up to its limit and dropping those past it", () => {
    vi.useFakeTimers();
    const fake = fakeFile();
    const { destination, reports } = destinationOn(fake, { maxHeldBytes: 10 });
    destination.write("busy\n");
    fake.answer({ error: "EAGAIN" });
    for (const line of ["1234\n", "5678\n", "past\n"]) destination.write(line);
    expect(reports.dropped).toBe(1);
    expect(fake.underWay()).toBe(0);
    vi.advanceTimersByTime(100);
    expect(fake.file.writes).toEqual(["busy\n", "busy\n"]);
    fake.answer("all");
    fake.answer("all");
    expect(fake.file.text).toBe("busy\n1234\n5678\n");
    expect(reports.recovered).toEqual([[1, "backlog"]]);
  });

  it("drops a line logged while the destination refuses, without holding it", () => {
    const fake = fakeFile();
    const { destination, reports } = destinationOn(fake);
    for (let line = 0; line < 1000; line++) {
      destination.write(`line ${line}\n`);
      fake.answer({ error: "ENOSPC" });
    }
    expect(reports.dropped).toBe(1000);
    expect(destination.unreported()).toEqual({ dropped: 1000, reason: "ENOSPC" });
  });

  it("at exit writes what it holds at once, and gives up on a refusal without retrying", () => {
    const fake = fakeFile();
    const synced: string[] = [];
    const writeSync = vi.fn((_fd: number, data: Uint8Array) => {
      synced.push(Buffer.from(data).toString());
      return data.length;
    });
    const { destination } = destinationOn(fake, { writeSync });
    destination.write("under way\n");
    destination.write("held 1\n");
    destination.write("held 2\n");
    destination.flushSync();
    expect(synced).toEqual(["held 1\nheld 2\n"]);

    const refused = vi.fn(() => {
      throw Object.assign(new Error("ENOSPC"), { code: "ENOSPC" });
    });
    const full = destinationOn(fakeFile(), { writeSync: refused });
    full.destination.write("a\n");
    full.destination.write("b\n");
    full.destination.write("c\n");
    const startedAt = performance.now();
    full.destination.flushSync();
    expect(performance.now() - startedAt).toBeLessThan(50);
    expect(refused).toHaveBeenCalledTimes(1);
    expect(full.reports.dropped).toBe(2);
  });

  it("at exit waits at most 100 ms for a busy destination", () => {
    const busy = vi.fn(() => {
      throw Object.assign(new Error("EAGAIN"), { code: "EAGAIN" });
    });
    const { destination, reports } = destinationOn(fakeFile(), { writeSync: busy });
    destination.write("under way\n");
    destination.write("held\n");
    const startedAt = performance.now();
    destination.flushSync();
    const took = performance.now() - startedAt;
    expect(took).toBeGreaterThanOrEqual(95);
    expect(took).toBeLessThan(300);
    expect(reports.dropped).toBe(1);
  });

  it.skipIf(!existsSync("/dev/full"))(
    "never throws on a real file that refuses every write (/dev/full)",
    async () => {
      const fd = openSync("/dev/full", "w");
      try {
        const dropped: number[] = [];
        const destination = createLogDestination({ fd, onDropped: (lines) => dropped.push(lines) });
        for (let line = 0; line < 50; line++) destination.write(`{"line":${line}}\n`);
        // The writes fail on the thread pool: waited for, up to 5 s, as a loaded machine may need.
        const settled = { timeout: 5000, interval: 10 };
        await vi.waitFor(() => expect(dropped.reduce((sum, lines) => sum + lines, 0)).toBe(50), settled);
        destination.write("under way at exit\n");
        destination.write("held at exit\n");
        const startedAt = performance.now();
        destination.flushSync();
        expect(performance.now() - startedAt).toBeLessThan(50);
        await vi.waitFor(
          () => expect(destination.unreported()).toEqual({ dropped: 52, reason: "ENOSPC" }),
          settled,
        );
      } finally {
        closeSync(fd);
      }
    },
  );
});
