/** SLUICE_UNPRICED_CALL_USD's default: what a call of unknown cost counts at, at least. */
export const defaultUnpricedCallUsd = 0.1;

/**
 * What the cap counts one call of unknown cost at (decision 0057): the largest known cost of one
 * call of the project this month (`largestUsd`, the figure its calls in flight are counted at), or
 * `floorUsd` when that is smaller or none is known yet. A client chooses its calls' model and
 * options, so it can make them all of unknown cost, and make its calls of known cost as small as it
 * likes: the floor bounds how many it can make under a cap whatever it does.
 */
export function unpricedCallEstimate(largestUsd: number, floorUsd: number): number {
  return Math.max(largestUsd, floorUsd);
}
