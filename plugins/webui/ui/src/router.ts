import { useEffect, useState } from "react";

// Hash routes: Airflow's external views open fixed URLs such as det/ui/#/dag/{DAG_ID}, and the
// static server needs to know only index.html.

/** Where a tab opened before its task is known waits for it (newTab.ts). */
export const OPENING_PATH = "/opening";

export type Route =
  | { page: "experiments" }
  | { page: "experiment"; id: number }
  | { page: "trial"; id: number }
  | { page: "queue" }
  | { page: "tasks" }
  | { page: "task"; id: number }
  | { page: "openTask"; id: number }
  | { page: "opening" }
  | { page: "resolve"; dagId: string; runId?: string; mapIndex?: string }
  | { page: "unknown"; path: string };

export function parseRoute(hash: string): Route {
  const path = hash.replace(/^#/, "") || "/experiments";
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const [head, ...rest] = parts;
  if (head === "experiments" && rest.length === 0) return { page: "experiments" };
  if (head === "experiments" && rest.length === 1 && /^\d+$/.test(rest[0])) {
    return { page: "experiment", id: Number(rest[0]) };
  }
  if (head === "trials" && rest.length === 1 && /^\d+$/.test(rest[0]))
    return { page: "trial", id: Number(rest[0]) };
  if (head === "queue" && rest.length === 0) return { page: "queue" };
  if (head === "tasks" && rest.length === 0) return { page: "tasks" };
  if (head === "tasks" && /^\d+$/.test(rest[0] ?? "")) {
    if (rest.length === 1) return { page: "task", id: Number(rest[0]) };
    if (rest.length === 2 && rest[1] === "open") return { page: "openTask", id: Number(rest[0]) };
  }
  if (path === OPENING_PATH) return { page: "opening" };
  if (head === "dag" && rest.length === 1) return { page: "resolve", dagId: rest[0] };
  if (head === "dag" && rest.length === 5 && rest[1] === "run" && rest[3] === "map") {
    return { page: "resolve", dagId: rest[0], runId: rest[2], mapIndex: rest[4] };
  }
  return { page: "unknown", path };
}

export function useRoute(): Route {
  const [hash, setHash] = useState(window.location.hash);
  useEffect(() => {
    const onChange = () => setHash(window.location.hash);
    window.addEventListener("hashchange", onChange);
    return () => window.removeEventListener("hashchange", onChange);
  }, []);
  return parseRoute(hash);
}

/** Goes to a page; `replace` keeps a redirect out of the browser's history. */
export function navigate(path: string, replace = false): void {
  if (replace) window.location.replace(`#${path}`);
  else window.location.hash = path;
}
