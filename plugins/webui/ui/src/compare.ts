// The Compare page's parts: what its URL holds, the trials chosen for it across experiments, and
// the side-by-side config table.

import { useState } from "react";

/** How many experiments (or trials) one Compare page takes. */
export const COMPARE_MIN = 2;
export const COMPARE_MAX = 10;

/** The Compare page of these experiments; the URL is the whole selection, so it can be shared. */
export function compareExperimentsPath(ids: number[]): string {
  return `/compare?experiments=${ids.join(",")}`;
}

/** The Compare page of these trials, of one experiment or several. */
export function compareTrialsPath(ids: number[]): string {
  return `/compare?trials=${ids.join(",")}`;
}

// Trials ticked on any experiment's Trials tab stay chosen while the person moves to another
// experiment's (for this browser tab's session), so one Compare page can take trials of several.
const CHOSEN_TRIALS = "det-compare-trials";

function storedTrials(): Set<number> {
  try {
    const stored: unknown = JSON.parse(window.sessionStorage.getItem(CHOSEN_TRIALS) ?? "[]");
    return new Set(Array.isArray(stored) ? stored.filter((id) => Number.isInteger(id)) : []);
  } catch {
    return new Set();
  }
}

/** The trials chosen for comparison, across experiments: the set, a toggle and a clear. */
export function useChosenTrials(): { chosen: Set<number>; toggle: (id: number) => void; clear: () => void } {
  const [chosen, setChosen] = useState<Set<number>>(storedTrials);
  const keep = (next: Set<number>) => {
    window.sessionStorage.setItem(CHOSEN_TRIALS, JSON.stringify([...next]));
    setChosen(next);
  };
  return {
    chosen,
    toggle: (id) => {
      const next = new Set(storedTrials());
      if (next.has(id)) next.delete(id);
      else next.add(id);
      keep(next);
    },
    clear: () => keep(new Set()),
  };
}

/**
 * A config as dotted paths (`searcher.metric`) to the text of each leaf. Lists are leaves, shown as
 * JSON, as are empty mappings, so that every setting is one row.
 */
export function flattenConfig(value: unknown, prefix = ""): Map<string, string> {
  const flat = new Map<string, string>();
  const isMapping = value !== null && typeof value === "object" && !Array.isArray(value);
  if (isMapping && Object.keys(value).length > 0) {
    for (const [key, inner] of Object.entries(value as Record<string, unknown>)) {
      for (const [path, text] of flattenConfig(inner, prefix ? `${prefix}.${key}` : key))
        flat.set(path, text);
    }
  } else if (prefix) {
    flat.set(prefix, typeof value === "string" ? value : JSON.stringify(value));
  }
  return flat;
}

export type ConfigRow = {
  path: string;
  /** One per config, in order; undefined where that config lacks the path. */
  values: (string | undefined)[];
  differs: boolean;
};

/** One row per path any of the configs has, sorted; a row differs unless every config has the same value. */
export function configRows(configs: unknown[]): ConfigRow[] {
  const flat = configs.map((config) => flattenConfig(config));
  const paths = [...new Set(flat.flatMap((f) => [...f.keys()]))].sort();
  return paths.map((path) => {
    const values = flat.map((f) => f.get(path));
    return { path, values, differs: new Set(values).size > 1 };
  });
}

/**
 * A series cut to about `maxPoints` for drawing: the lowest and the highest point of each of
 * `maxPoints / 2` runs of consecutive points, in their order, so peaks and dips stay on the chart.
 * The master keeps the best trials' series whole; ten experiments of them are more points than a
 * chart has pixels for.
 */
export function thinned(x: number[], y: number[], maxPoints: number): { x: number[]; y: number[] } {
  if (x.length <= maxPoints) return { x, y };
  const buckets = Math.floor(maxPoints / 2);
  const size = x.length / buckets;
  const xs: number[] = [];
  const ys: number[] = [];
  for (let b = 0; b < buckets; b++) {
    const start = Math.floor(b * size);
    const end = Math.min(x.length, Math.floor((b + 1) * size));
    let low = start;
    let high = start;
    for (let i = start + 1; i < end; i++) {
      if (y[i] < y[low]) low = i;
      if (y[i] > y[high]) high = i;
    }
    for (const i of low === high ? [low] : [Math.min(low, high), Math.max(low, high)]) {
      xs.push(x[i]);
      ys.push(y[i]);
    }
  }
  return { x: xs, y: ys };
}
