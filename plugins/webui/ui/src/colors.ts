// Series colours: the best trials stand out in strong colours, the rest share a muted palette.

const STRONG = [
  "#d62728",
  "#1f77b4",
  "#2ca02c",
  "#ff7f0e",
  "#9467bd",
  "#8c564b",
  "#e377c2",
  "#17becf",
  "#bcbd22",
  "#7f7f7f",
];

export function strongColor(index: number): string {
  return STRONG[index % STRONG.length];
}

export function mutedColor(index: number): string {
  return `hsla(${(index * 137.508) % 360}, 45%, 55%, 0.55)`;
}

/** A colour from good (green) to bad (red) for a value between 0 (best) and 1 (worst). */
export function rankColor(fraction: number): string {
  const hue = 120 * (1 - Math.min(1, Math.max(0, fraction)));
  return `hsl(${hue}, 70%, 42%)`;
}
