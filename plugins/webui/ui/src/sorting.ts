import { useMemo, useState } from "react";

export type SortState = { key: string; descending: boolean };

/** Numbers before text, missing values last, whichever the direction. */
export function compareValues(a: unknown, b: unknown): number {
  const missingA = a === null || a === undefined || a === "";
  const missingB = b === null || b === undefined || b === "";
  if (missingA || missingB) return missingA === missingB ? 0 : missingA ? 1 : -1;
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

/** Rows sorted by the column last clicked; clicking it again flips the direction. */
export function useSorted<T>(
  rows: T[],
  value: (row: T, key: string) => unknown,
  initial: SortState,
): { sorted: T[]; sort: SortState; toggle: (key: string) => void } {
  const [sort, setSort] = useState(initial);
  const sorted = useMemo(() => {
    const copy = [...rows];
    copy.sort((a, b) => {
      const va = value(a, sort.key);
      const vb = value(b, sort.key);
      const missing = va === null || va === undefined || vb === null || vb === undefined;
      const order = compareValues(va, vb);
      return sort.descending && !missing ? -order : order;
    });
    return copy;
    // `value` is a pure accessor recreated each render; the rows and sort decide the order.
  }, [rows, sort]);
  const toggle = (key: string) =>
    setSort((current) =>
      current.key === key ? { key, descending: !current.descending } : { key, descending: false },
    );
  return { sorted, sort, toggle };
}
