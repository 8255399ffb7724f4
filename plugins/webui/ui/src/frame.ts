/**
 * Whether the page's frame withholds a sandbox permission (`allow-downloads`, `allow-popups`).
 * Airflow shows its nav, DAG and task instance views in frames sandboxed without `allow-popups`
 * (nor, for some, `allow-downloads`), where what they forbid silently does nothing.
 */
export function frameForbids(permission: string): boolean {
  try {
    const sandbox = window.frameElement?.getAttribute("sandbox");
    return typeof sandbox === "string" && !sandbox.split(/\s+/).includes(permission);
  } catch {
    return false; // a frame of another origin: nothing to read, and no reason to assume the worst
  }
}
