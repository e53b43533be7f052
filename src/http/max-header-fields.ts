/**
 * The most header lines a request may carry, its trailers' too: the server's `maxHeadersCount`
 * (Node's own default, which it applies without saying so). Node keeps the first of them and drops
 * the rest unseen, so a request that reaches the limit is refused whole (431): a second Host or
 * credential header past it would otherwise go unchecked, where a proxy in front may read it.
 */
export const maxHeaderFields = 1000;
