// Maps hyperparameter and metric values to positions for the SVG views. A hyperparameter's axis
// follows its type in the config: `log` on a logarithmic scale, `categorical` as evenly spaced
// categories (numbers in their order), `int` of only a few distinct values as even steps, `double`
// linear. Values of unknown type (a metric, nested hyperparameters the config does not describe):
// numbers on a linear scale, or a logarithmic one when they span orders of magnitude, anything else
// as categories.

export type Axis = {
  name: string;
  /** 0..1 along the axis, or null for a value the axis has no place for. */
  position: (value: unknown) => number | null;
  ticks: { at: number; label: string }[];
  /** How many cells the axis has in a heat map; `cell` is the one a position falls in. */
  cells: number;
  cell: (position: number) => number;
};

const NUMERIC_CELLS = 5;

function label(value: unknown): string {
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toPrecision(3);
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

/** How an axis places its values: from the hyperparameter's type, or "auto" from the values. */
export type AxisScale = "auto" | "log" | "linear" | "categorical" | "int";

export function makeAxis(
  name: string,
  values: unknown[],
  { continuous = false, scale = "auto" }: { continuous?: boolean; scale?: AxisScale } = {},
): Axis {
  const present = values.filter((v) => v !== null && v !== undefined);
  const numeric = present.length > 0 && present.every((v) => typeof v === "number" && Number.isFinite(v));
  const distinct = [...new Set(present)];
  // A few distinct integers (layers: 1, 2, 3) read better as even steps than on a continuous scale.
  const steps =
    scale === "categorical" ||
    (numeric &&
      !continuous &&
      (scale === "auto" || scale === "int") &&
      distinct.length <= NUMERIC_CELLS &&
      distinct.every(Number.isInteger));
  if (!numeric || steps) {
    const ordered = numeric ? (distinct as number[]).sort((a, b) => a - b) : distinct;
    const categories = [...new Set(ordered.map(label))];
    if (!numeric) categories.sort();
    const at = (i: number) => (categories.length === 1 ? 0.5 : i / (categories.length - 1));
    return {
      name,
      position: (value) => {
        const i = categories.indexOf(label(value));
        return i < 0 ? null : at(i);
      },
      ticks: categories.map((c, i) => ({ at: at(i), label: c })),
      cells: categories.length,
      cell: (position) => Math.round(position * Math.max(0, categories.length - 1)),
    };
  }
  const numbers = present as number[];
  const min = Math.min(...numbers);
  const max = Math.max(...numbers);
  const log = min > 0 && (scale === "log" || (scale === "auto" && max / min >= 100));
  const f = log ? Math.log10 : (v: number) => v;
  const lo = f(min);
  const span = f(max) - lo;
  const position = (value: unknown) =>
    typeof value === "number" && Number.isFinite(value) && (!log || value > 0)
      ? span === 0
        ? 0.5
        : (f(value) - lo) / span
      : null;
  return {
    name: log ? `${name} (log)` : name,
    position,
    ticks:
      span === 0
        ? [{ at: 0.5, label: label(min) }]
        : [
            { at: 0, label: label(min) },
            { at: 1, label: label(max) },
          ],
    cells: span === 0 ? 1 : NUMERIC_CELLS,
    cell: (position) => (span === 0 ? 0 : Math.min(NUMERIC_CELLS - 1, Math.floor(position * NUMERIC_CELLS))),
  };
}
