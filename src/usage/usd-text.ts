/**
 * An amount in USD as Sluice's messages name it: plain digits to the billionth (the precision a
 * cost is recorded and the cap compared at), no trailing zeros, as `--monthly-spend-cap` is shown:
 * `0.501`, not a float sum's `0.5010000000000001`; `0.0000001`, not `1e-7`.
 */
export function usdText(amount: number): string {
  if (!Number.isFinite(amount) || Math.abs(amount) >= 1e21) return String(amount);
  const text = amount.toFixed(9).replace(/\.?0+$/, "");
  return text === "-0" ? "0" : text;
}
