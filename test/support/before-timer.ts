/** What `beforeTimer` answers when the timer fired first. */
export const timerFiredFirst = Symbol("the timer fired first");

/**
 * The value `promise` settles with, or `timerFiredFirst` when a timer of `ms`, set now, fires before
 * it does. An order of events, not a duration: a loaded machine runs every timer late, but still in
 * the order they are due, and runs the promise callbacks a timer's callback settles before the next
 * timer's; a duration measured around the same wait is what a loaded machine stretches. So "answers
 * at once, not after its wait of W ms" is `beforeTimer(answer, W / 2)`, true on any machine.
 */
export async function beforeTimer<T>(
  promise: T | PromiseLike<T>,
  ms: number,
): Promise<T | typeof timerFiredFirst> {
  let timer: NodeJS.Timeout | undefined;
  const fired = new Promise<typeof timerFiredFirst>((resolve) => {
    timer = setTimeout(() => resolve(timerFiredFirst), ms);
  });
  try {
    return await Promise.race([Promise.resolve(promise), fired]);
  } finally {
    clearTimeout(timer);
  }
}
