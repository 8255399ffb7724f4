// How values read on the pages: one place for dates, durations, metrics and sizes.

export const DASH = "—";

export function formatDate(iso: string | null | undefined): string {
  if (!iso) return DASH;
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

export function durationSeconds(start: string | null, end: string | null, now = Date.now()): number | null {
  if (!start) return null;
  const from = new Date(start).getTime();
  const to = end ? new Date(end).getTime() : now;
  return Number.isNaN(from) || Number.isNaN(to) ? null : Math.max(0, (to - from) / 1000);
}

export function formatDuration(seconds: number | null): string {
  if (seconds === null) return DASH;
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (h > 0) return `${h}h ${m}m`;
  if (m > 0) return `${m}m ${s % 60}s`;
  return `${s}s`;
}

export function formatNumber(value: unknown): string {
  if (typeof value !== "number" || !Number.isFinite(value))
    return value === null || value === undefined ? DASH : String(value);
  if (Number.isInteger(value)) return String(value);
  const abs = Math.abs(value);
  return abs !== 0 && (abs < 1e-3 || abs >= 1e6) ? value.toExponential(3) : value.toPrecision(4);
}

export function formatPercent(progress: number | null | undefined): string {
  return progress === null || progress === undefined ? DASH : `${Math.round(progress * 100)}%`;
}

export function formatBytes(size: number | null | undefined): string {
  if (size === null || size === undefined) return DASH;
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = size;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

export function formatValue(value: unknown): string {
  if (typeof value === "number") return formatNumber(value);
  if (value === null || value === undefined) return DASH;
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}
