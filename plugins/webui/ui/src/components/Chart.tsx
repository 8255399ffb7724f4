import { useEffect, useMemo, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

export type ChartSeries = {
  label: string;
  x: number[];
  y: number[];
  color: string;
  width?: number;
};

type Props = {
  series: ChartSeries[];
  xLabel: string;
  yLabel: string;
  logY?: boolean;
  height?: number;
  testId?: string;
};

/**
 * Line chart of many series, each with its own x values (uPlot's faceted mode 2), so trials that
 * reported at different steps or times need no common x grid. On a log scale, points at or below
 * zero are left out, as they have no place on it.
 */
export function Chart({ series, xLabel, yLabel, logY = false, height = 320, testId }: Props) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  // Series with nothing to draw (no point, or none above zero on a log scale) are left out: uPlot
  // cannot lay out an axis over no values. A series of one point is drawn as a marker.
  const drawable = useMemo(() => drawableSeries(series, logY), [series, logY]);
  const layout = `${logY}|${xLabel}|${yLabel}|${height}|${drawable.map((s) => `${s.label}:${s.color}:${s.width ?? 1}:${s.x.length === 1}`).join(",")}`;

  const data = useMemo(() => toData(drawable), [drawable]);
  const drawn = useRef<uPlot.AlignedData | null>(null);

  useEffect(() => {
    const element = box.current;
    if (!element || drawable.length === 0) return;
    // Axis text and grid in the page's colours (Airflow's light or dark mode, theme.ts).
    const style = getComputedStyle(element);
    const axis = {
      stroke: style.getPropertyValue("--fg").trim() || "#1d2430",
      grid: { stroke: style.getPropertyValue("--line").trim() || "#d9dee7", width: 1 },
      ticks: { stroke: style.getPropertyValue("--line").trim() || "#d9dee7", width: 1 },
    };
    const opts: uPlot.Options = {
      mode: 2,
      width: Math.max(element.clientWidth, 300),
      height,
      legend: { show: false },
      cursor: { drag: { x: true, y: true, uni: 20 }, points: { show: false } },
      // One value (a single point, or equal ones) still gets a range around it.
      scales: {
        x: { time: false, auto: true, range: (_u, min, max) => around(min, max, false) },
        y: { auto: true, distr: logY ? 3 : 1, range: (_u, min, max) => around(min, max, logY) },
      },
      axes: [
        { label: xLabel, ...axis },
        { label: yLabel, size: 70, ...axis },
      ],
      series: [
        {},
        ...drawable.map((s) => ({
          label: s.label,
          stroke: s.color,
          width: s.width ?? 1,
          facets: [
            { scale: "x", auto: true },
            { scale: "y", auto: true },
          ],
          // A line needs two points: one point is drawn as a marker (in faceted mode markers are
          // a paths builder of their own).
          paths: s.x.length === 1 ? uPlot.paths.points!() : uPlot.paths.linear!(),
          points: { show: s.x.length === 1, size: 7, fill: s.color, stroke: s.color },
        })),
      ],
    };
    plot.current = new uPlot(opts, data, element);
    drawn.current = data;
    const resize = new ResizeObserver(() => {
      plot.current?.setSize({ width: Math.max(element.clientWidth, 300), height });
    });
    resize.observe(element);
    return () => {
      resize.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
    // A new layout builds a new chart; new numbers alone are handed to the chart below.
  }, [layout]);

  useEffect(() => {
    if (plot.current && drawn.current !== data) {
      plot.current.setData(data);
      drawn.current = data;
    }
  }, [data]);

  if (drawable.length === 0) {
    return (
      <div className="chart chart-empty" data-testid={testId}>
        No points to draw{logY ? " above zero on a log scale" : " yet"}.
      </div>
    );
  }
  return <div ref={box} className="chart" data-testid={testId} />;
}

function drawableSeries(series: ChartSeries[], logY: boolean): ChartSeries[] {
  const kept: ChartSeries[] = [];
  for (const s of series) {
    const xs: number[] = [];
    const ys: number[] = [];
    s.y.forEach((value, i) => {
      const x = s.x[i];
      if (Number.isFinite(x) && Number.isFinite(value) && (!logY || value > 0)) {
        xs.push(x);
        ys.push(value);
      }
    });
    if (xs.length > 0) kept.push({ ...s, x: xs, y: ys });
  }
  return kept;
}

/** The range of an axis whose values lie in [min, max]; one value gets room on both sides. */
function around(min: number | null, max: number | null, log: boolean): [number, number] {
  const low = min ?? 0;
  const high = max ?? low;
  if (high > low) {
    const [from, to] = log ? uPlot.rangeLog(low, high, 10, false) : uPlot.rangeNum(low, high, 0.1, true);
    return [from ?? low, to ?? high];
  }
  if (log) return [low / 2, high * 2];
  const pad = low === 0 ? 1 : Math.abs(low) * 0.5;
  return [low - pad, high + pad];
}

function toData(series: ChartSeries[]): uPlot.AlignedData {
  return [null, ...series.map((s) => [s.x, s.y])] as unknown as uPlot.AlignedData;
}
