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
  const layout = `${logY}|${xLabel}|${yLabel}|${height}|${series.map((s) => `${s.label}:${s.color}:${s.width ?? 1}`).join(",")}`;

  const data = useMemo(() => toData(series, logY), [series, logY]);
  const drawn = useRef<uPlot.AlignedData | null>(null);

  useEffect(() => {
    const element = box.current;
    if (!element) return;
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
      scales: { x: { time: false, auto: true }, y: { auto: true, distr: logY ? 3 : 1 } },
      axes: [
        { label: xLabel, ...axis },
        { label: yLabel, size: 70, ...axis },
      ],
      series: [
        {},
        ...series.map((s) => ({
          label: s.label,
          stroke: s.color,
          width: s.width ?? 1,
          facets: [
            { scale: "x", auto: true },
            { scale: "y", auto: true },
          ],
          paths: uPlot.paths.linear!(),
          points: { show: false },
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

  return <div ref={box} className="chart" data-testid={testId} />;
}

function toData(series: ChartSeries[], logY: boolean): uPlot.AlignedData {
  const facets = series.map((s) => {
    if (!logY) return [s.x, s.y];
    const xs: number[] = [];
    const ys: number[] = [];
    s.y.forEach((value, i) => {
      if (value > 0) {
        xs.push(s.x[i]);
        ys.push(value);
      }
    });
    return [xs, ys];
  });
  return [null, ...facets] as unknown as uPlot.AlignedData;
}
