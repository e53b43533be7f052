import { closeSync, existsSync, openSync, writeSync } from "node:fs";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createLogDestination, type LogDestinationOptions } from "./log-destination.js";

type Answer = { error: string } | { written: number } | "all";

/**
 * An `fs.writeSync` the test scripts: each call takes the next answer given (all of what it is
 * given when none is left), and records what it was given and what it wrote.
 */
function fakeFile() {
  const file = { text: "", writes: [] as string[] };
  const answers: Answer[] = [];
  const writeSync = (_fd: number, data: Uint8Array): number => {
    file.writes.push(Buffer.from(data).toString());
    const result = answers.shift() ?? "all";
    if (typeof result === "object" && "error" in result)
      throw Object.assign(new Error(result.error), { code: result.error });
    const written = result === "all" ? data.length : result.written;
    file.text += Buffer.from(data.subarray(0, written)).toString();
    return written;
  };
  return { file, writeSync, answer: (...next: Answer[]) => answers.push(...next) };
}

function destinationOn(fake: ReturnType<typeof fakeFile>, options: Partial<LogDestinationOptions> = {}) {
  const reports = { dropped: 0, recovered: [] as Array<[number, string]> };
  const destination = createLogDestination({
    fd: 99,
    writeSync: fake.writeSync,
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

  it("writes each line when it is logged", () => {
    const fake = fakeFile();
    const { destination, reports } = destinationOn(fake);
    destination.write("a\n");
    expect(fake.file.text).toBe("a\n");
    destination.write("b\n");
    destination.write("c\n");
    expect(fake.file.writes).toEqual(["a\n", "b\n", "c\n"]);
    expect(fake.file.text).toBe("a\nb\nc\n");
    expect(reports).toEqual({ dropped: 0, recovered: [] });
  });

  it("writes the rest of a partial write", () => {
    const fake = fakeFile();
    const { destination } = destinationOn(fake);
    fake.answer({ written: 2 });
    destination.write("hello\n");
    expect(fake.file.writes).toEqual(["hello\n", "llo\n"]);
    expect(fake.file.text).toBe("hello\n");
  });

  it.each(["ENOSPC", "EPIPE", "EIO", "EBADF"])(
    "drops and counts the lines a write refuses with %s, never retries them, and says so once writes work again",
    (code) => {
      const fake = fakeFile();
      const { destination, reports } = destinationOn(fake);
      fake.answer({ error: code }, { error: code }, { error: code });
      destination.write("one\n");
      destination.write("two\n");
      destination.write("three\n");
      expect(fake.file.writes).toEqual(["one\n", "two\n", "three\n"]);
      expect(reports.dropped).toBe(3);
      destination.write("four\n");
      // The report is a line logged by `onRecovered` (here, none): "four" is written all the same.
      expect(fake.file.text).toBe("four\n");
      expect(reports.recovered).toEqual([[3, code]]);
      expect(destination.unreported().dropped).toBe(0);
    },
  );

  it("writes the line `onRecovered` logs right after the one that worked, the lines held before it after", () => {
    vi.useFakeTimers();
    const fake = fakeFile();
    let destination: ReturnType<typeof createLogDestination> | undefined;
    destination = createLogDestination({
      fd: 99,
      writeSync: fake.writeSync,
      onRecovered: (dropped, reason) => destination?.write(`dropped ${dropped} ${reason}\n`),
    });
    fake.answer({ error: "EPIPE" }, { written: 3 }, { error: "EAGAIN" });
    destination.write("lost\n");
    destination.write("first\n");
    destination.write("held\n");
    vi.advanceTimersByTime(100);
    expect(fake.file.text).toBe("first\ndropped 1 EPIPE\nheld\n");
  });

  it("starts a new line after dropping the rest of one cut short by a full disk", () => {
    const fake = fakeFile();
    const { destination, reports } = destinationOn(fake);
    fake.answer({ written: 5 }, { error: "ENOSPC" });
    destination.write("first line\n");
    destination.write("second\n");
    expect(fake.file.text).toBe("first\nsecond\n");
    expect(reports.recovered).toEqual([[1, "ENOSPC"]]);
  });

  it("waits out EAGAIN (a busy pipe), holding lines up to its limit and dropping those past it", () => {
    vi.useFakeTimers();
    const fake = fakeFile();
    const { destination, reports } = destinationOn(fake, { maxHeldBytes: 10 });
    fake.answer({ error: "EAGAIN" });
    destination.write("busy\n");
    for (const line of ["1234\n", "5678\n", "past\n"]) destination.write(line);
    expect(reports.dropped).toBe(1);
    expect(fake.file.writes).toEqual(["busy\n"]);
    vi.advanceTimersByTime(99);
    expect(fake.file.writes).toEqual(["busy\n"]);
    fake.answer({ error: "EAGAIN" });
    vi.advanceTimersByTime(1);
    expect(fake.file.writes).toEqual(["busy\n", "busy\n"]);
    vi.advanceTimersByTime(100);
    // The lines held meanwhile are joined into one write.
    expect(fake.file.writes).toEqual(["busy\n", "busy\n", "busy\n", "1234\n5678\n"]);
    expect(fake.file.text).toBe("busy\n1234\n5678\n");
    expect(reports.recovered).toEqual([[1, "backlog"]]);
    destination.write("next\n");
    expect(fake.file.text).toBe("busy\n1234\n5678\nnext\n");
  });

  it("joins the lines held while busy into writes of 16 KiB at most", () => {
    vi.useFakeTimers();
    const fake = fakeFile();
    const { destination } = destinationOn(fake);
    fake.answer({ error: "EAGAIN" });
    const line = `${"x".repeat(1023)}\n`;
    for (let count = 0; count < 40; count++) destination.write(line);
    vi.advanceTimersByTime(100);
    // The chunk begun (the first line) is tried again as it was, then the lines held after it.
    const sizes = fake.file.writes.map((text) => text.length);
    expect(sizes).toEqual([1024, 1024, 16 * 1024, 16 * 1024, 7 * 1024]);
    expect(fake.file.text).toBe(line.repeat(40));
  });

  it("drops a line logged while the destination refuses, without holding it", () => {
    const fake = fakeFile();
    const { destination, reports } = destinationOn(fake);
    for (let line = 0; line < 1000; line++) {
      fake.answer({ error: "ENOSPC" });
      destination.write(`line ${line}\n`);
    }
    expect(reports.dropped).toBe(1000);
    expect(destination.unreported()).toEqual({ dropped: 1000, reason: "ENOSPC" });
  });

  it("at exit writes what it holds at once, the rest of a chunk begun first, and gives up on a refusal without retrying", () => {
    vi.useFakeTimers();
    const fake = fakeFile();
    const { destination } = destinationOn(fake);
    fake.answer({ written: 3 }, { error: "EAGAIN" });
    destination.write("under way\n");
    destination.write("held 1\n");
    destination.write("held 2\n");
    destination.flushSync();
    expect(fake.file.writes.at(-1)).toBe("er way\nheld 1\nheld 2\n");
    expect(fake.file.text).toBe("under way\nheld 1\nheld 2\n");
    // The retry is cancelled: nothing is written twice.
    vi.advanceTimersByTime(1000);
    expect(fake.file.text).toBe("under way\nheld 1\nheld 2\n");

    const full = fakeFile();
    const refused = destinationOn(full);
    full.answer({ error: "EAGAIN" }, { error: "ENOSPC" }, "all");
    refused.destination.write("a\n");
    refused.destination.write("b\n");
    refused.destination.write("c\n");
    refused.destination.flushSync();
    // One write at exit, refused and not tried again: a second would have been written. Counted, not
    // timed (the fake timers stop performance.now too, and a wait at exit is a loop of writes).
    expect(full.file.writes).toEqual(["a\n", "a\nb\nc\n"]);
    expect(full.file.text).toBe("");
    expect(refused.reports.dropped).toBe(3);
  });

  it("at exit waits at most 100 ms for a busy destination", () => {
    const fake = fakeFile();
    const { destination, reports } = destinationOn(fake);
    fake.answer(...Array.from({ length: 1000 }, () => ({ error: "EAGAIN" })));
    destination.write("busy\n");
    destination.write("held\n");
    const startedAt = performance.now();
    destination.flushSync();
    const took = performance.now() - startedAt;
    expect(took).toBeGreaterThanOrEqual(95);
    // Not until the 1,000 EAGAINs are waited out (10 s at 10 ms each): a loaded machine's late wake-ups
    // stretch the 100 ms, not to a second.
    expect(took).toBeLessThan(1000);
    expect(reports.dropped).toBe(2);
  });

  it.skipIf(!existsSync("/dev/full"))(
    "never throws on a real file that refuses every write (/dev/full)",
    () => {
      const fd = openSync("/dev/full", "w");
      try {
        const dropped: number[] = [];
        let writes = 0;
        const destination = createLogDestination({
          fd,
          // The real write, counted.
          writeSync: (target, data) => {
            writes++;
            return writeSync(target, data);
          },
          onDropped: (lines) => dropped.push(lines),
        });
        for (let line = 0; line < 50; line++) destination.write(`{"line":${line}}\n`);
        expect(dropped.reduce((sum, lines) => sum + lines, 0)).toBe(50);
        destination.write("at exit\n");
        destination.flushSync();
        // Each line tried once and dropped, none tried again, at exit neither: counted, not timed.
        expect(writes).toBe(51);
        expect(destination.unreported()).toEqual({ dropped: 51, reason: "ENOSPC" });
      } finally {
        closeSync(fd);
      }
    },
  );
});
