/**
 * The form of a project id, given or generated (`prj_…`). It has no schema library behind it: the
 * gateway checks ids on every call and loads none at start (docs/decisions/0005).
 */
export const projectIdPattern = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;
export const projectIdRule = "must match ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$";
