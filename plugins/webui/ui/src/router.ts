import { useEffect, useState } from "react";

// Hash routes: Airflow's external views open fixed URLs such as det/ui/#/dag/{DAG_ID}, and the
// static server needs to know only index.html.

/** Where a tab opened before its task is known waits for it (newTab.ts). */
export const OPENING_PATH = "/opening";

export type Route =
  | { page: "experiments" }
  | { page: "experiment"; id: number }
  | { page: "compare"; experiments: number[]; trials: number[] }
  | { page: "trial"; id: number }
  | { page: "queue" }
  | { page: "tasks" }
  | { page: "models" }
  | { page: "model"; name: string }
  | { page: "workspaces" }
  | { page: "webhooks" }
  | { page: "workspace"; id: number }
  | { page: "project"; id: number }
  | { page: "task"; id: number }
  | { page: "openTask"; id: number }
  | { page: "opening" }
  | { page: "resolve"; dagId: string; runId?: string; mapIndex?: string }
  | { page: "unknown"; path: string };

export function parseRoute(hash: string): Route {
  const path = hash.replace(/^#/, "") || "/experiments";
  const compare = /^\/compare\/?(?:\?(.*))?$/s.exec(path);
  if (compare) {
    const params = new URLSearchParams(compare[1] ?? "");
    return {
      page: "compare",
      experiments: idList(params.get("experiments")),
      trials: idList(params.get("trials")),
    };
  }
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
  if (head === "models" && rest.length === 0) return { page: "models" };
  if (head === "models" && rest.length === 1) return { page: "model", name: rest[0] };
  if (head === "workspaces" && rest.length === 0) return { page: "workspaces" };
  if (head === "webhooks" && rest.length === 0) return { page: "webhooks" };
  if (head === "workspaces" && rest.length === 1 && /^\d+$/.test(rest[0]))
    return { page: "workspace", id: Number(rest[0]) };
  if (head === "projects" && rest.length === 1 && /^\d+$/.test(rest[0]))
    return { page: "project", id: Number(rest[0]) };
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

/** `1,2,3` as IDs, each once, in the order given; anything that is not an ID is left out. */
function idList(text: string | null): number[] {
  const ids = (text ?? "").split(",").filter((part) => /^\d+$/.test(part.trim()));
  return [...new Set(ids.map((part) => Number(part.trim())))];
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
