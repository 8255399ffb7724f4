import { useMemo } from "react";
import type { Trial } from "../../api";
import { rankColor } from "../../colors";
import { formatNumber } from "../../format";
import { flattenHparams, hparamNames, type SearcherInfo } from "../../hparams";
import { type Axis, makeAxis } from "../../scales";

type Point = { trialId: number; hparams: Record<string, unknown>; metric: number; color: string };

const PAD = 40;
// Pairs of the first hyperparameters only: n names make n(n-1)/2 heat maps.
const HEATMAP_NAMES = 8;

/**
 * Where each trial's hyperparameters led: parallel coordinates, one scatter per hyperparameter, and a
 * heat map of the mean metric for each pair of hyperparameters.
 */
export function HparamsTab({ trials, searcher }: { trials: Trial[]; searcher: SearcherInfo }) {
  const names = useMemo(() => hparamNames(trials), [trials]);
  const points = useMemo((): Point[] => {
    const scored = trials.filter((t) => t.best_validation !== null);
    const metrics = scored.map((t) => t.best_validation!.metric);
    const lo = Math.min(...metrics);
    const hi = Math.max(...metrics);
    return scored.map((t) => {
      const metric = t.best_validation!.metric;
      const goodness = hi === lo ? 0 : (metric - lo) / (hi - lo);
      return {
        trialId: t.id,
        hparams: flattenHparams(t.hparams),
        metric,
        color: rankColor(searcher.smallerIsBetter ? goodness : 1 - goodness),
      };
    });
  }, [trials, searcher]);
  const metricName = `best ${searcher.metric ?? "metric"}`;
  const goodness = (metric: number) => {
    const values = points.map((p) => p.metric);
    const lo = Math.min(...values);
    const hi = Math.max(...values);
    const fraction = hi === lo ? 0 : (metric - lo) / (hi - lo);
    return searcher.smallerIsBetter ? fraction : 1 - fraction;
  };

  if (names.length === 0) return <p className="muted">This experiment has no hyperparameters.</p>;
  if (points.length === 0)
    return <p className="muted">No trial has reported {searcher.metric ?? "its searcher metric"} yet.</p>;
  const metricAxis = makeAxis(
    metricName,
    points.map((p) => p.metric),
    { continuous: true },
  );
  const axes = [
    ...names.map((name) =>
      makeAxis(
        name,
        points.map((p) => p.hparams[name]),
      ),
    ),
    metricAxis,
  ];

  return (
    <div>
      <p className="muted">
        {points.length} trials with a {searcher.metric ?? "searcher metric"} value; green is better, red is
        worse.
      </p>
      <Parallel
        axes={axes}
        rows={points.map((p) => ({ ...p, values: [...names.map((n) => p.hparams[n]), p.metric] }))}
      />
      <div className="scatters">
        {names.map((name, i) => (
          <Scatter
            key={name}
            xAxis={axes[i]}
            yAxis={metricAxis}
            points={points.map((p) => ({ ...p, x: p.hparams[name] }))}
          />
        ))}
      </div>
      {names.length > 1 ? (
        <>
          <h3>Mean {searcher.metric ?? "metric"} by pairs of hyperparameters</h3>
          <div className="scatters">
            {names.slice(0, HEATMAP_NAMES).flatMap((yName, j) =>
              names.slice(0, j).map((xName, i) => (
                <Heatmap
                  key={`${xName}|${yName}`}
                  xAxis={axes[i]}
                  yAxis={axes[j]}
                  cells={points.map((p) => ({
                    x: p.hparams[xName],
                    y: p.hparams[yName],
                    metric: p.metric,
                  }))}
                  color={(metric) => rankColor(goodness(metric))}
                />
              )),
            )}
          </div>
        </>
      ) : null}
    </div>
  );
}

type ParallelRow = Point & { values: unknown[] };

function Parallel({ axes, rows }: { axes: Axis[]; rows: ParallelRow[] }) {
  const width = Math.max(640, axes.length * 150);
  const height = 320;
  const x = (i: number) => PAD + (i * (width - 2 * PAD)) / Math.max(1, axes.length - 1);
  const y = (at: number) => height - PAD - at * (height - 2 * PAD);
  return (
    <div className="scroll">
      <svg
        data-testid="hp-parallel"
        width={width}
        height={height}
        role="img"
        aria-label="Parallel coordinates of hyperparameters and metric"
      >
        {rows.map((row) => {
          const coords = row.values.map((value, i) => {
            const at = axes[i].position(value);
            return at === null ? null : `${x(i)},${y(at)}`;
          });
          if (coords.includes(null)) return null;
          return (
            <polyline
              key={row.trialId}
              points={coords.join(" ")}
              fill="none"
              stroke={row.color}
              strokeOpacity={0.6}
              data-trial={row.trialId}
            >
              <title>
                trial {row.trialId}: {formatNumber(row.metric)}
              </title>
            </polyline>
          );
        })}
        {axes.map((axis, i) => (
          <g key={axis.name}>
            <line x1={x(i)} x2={x(i)} y1={y(0)} y2={y(1)} stroke="#333" />
            <text x={x(i)} y={PAD - 16} textAnchor="middle" className="axis-title">
              {axis.name}
            </text>
            {axis.ticks.map((tick) => (
              <text key={`${tick.label}@${tick.at}`} x={x(i) + 4} y={y(tick.at) + 4} className="tick">
                {tick.label}
              </text>
            ))}
          </g>
        ))}
      </svg>
    </div>
  );
}

function Scatter({ xAxis, yAxis, points }: { xAxis: Axis; yAxis: Axis; points: (Point & { x: unknown })[] }) {
  const width = 300;
  const height = 220;
  const left = 56;
  const px = (at: number) => left + at * (width - left - 16);
  const py = (at: number) => height - 36 - at * (height - 56);
  return (
    <figure className="scatter">
      <svg
        data-testid="hp-scatter"
        data-hparam={xAxis.name}
        width={width}
        height={height}
        role="img"
        aria-label={`${yAxis.name} against ${xAxis.name}`}
      >
        <line x1={px(0)} x2={px(1)} y1={py(0)} y2={py(0)} stroke="#999" />
        <line x1={px(0)} x2={px(0)} y1={py(0)} y2={py(1)} stroke="#999" />
        <AxisTicks axis={xAxis} along="x" at={px} offset={height - 20} />
        <AxisTicks axis={yAxis} along="y" at={(t) => py(t) + 4} offset={left - 4} />
        {points.map((p) => {
          const ax = xAxis.position(p.x);
          const ay = yAxis.position(p.metric);
          if (ax === null || ay === null) return null;
          return (
            <circle key={p.trialId} cx={px(ax)} cy={py(ay)} r={4} fill={p.color} fillOpacity={0.75}>
              <title>
                trial {p.trialId}: {String(p.x)} → {formatNumber(p.metric)}
              </title>
            </circle>
          );
        })}
      </svg>
      <figcaption>{xAxis.name}</figcaption>
    </figure>
  );
}

type HeatmapProps = {
  xAxis: Axis;
  yAxis: Axis;
  cells: { x: unknown; y: unknown; metric: number }[];
  color: (metric: number) => string;
};

function Heatmap({ xAxis, yAxis, cells, color }: HeatmapProps) {
  const size = 180;
  const left = 56;
  const sums = new Map<string, { total: number; count: number }>();
  for (const { x, y, metric } of cells) {
    const ax = xAxis.position(x);
    const ay = yAxis.position(y);
    if (ax === null || ay === null) continue;
    const key = `${xAxis.cell(ax)},${yAxis.cell(ay)}`;
    const sum = sums.get(key) ?? { total: 0, count: 0 };
    sum.total += metric;
    sum.count += 1;
    sums.set(key, sum);
  }
  const w = size / xAxis.cells;
  const h = size / yAxis.cells;
  // Labels sit at the middle of the cell their value falls in.
  const middle = (axis: Axis, at: number) => (axis.cell(at) + 0.5) / axis.cells;
  return (
    <figure className="scatter">
      <svg
        data-testid="hp-heatmap"
        data-pair={`${xAxis.name}|${yAxis.name}`}
        width={left + size + 8}
        height={size + 40}
        role="img"
        aria-label={`mean metric by ${xAxis.name} and ${yAxis.name}`}
      >
        {[...sums.entries()].map(([key, { total, count }]) => {
          const [cx, cy] = key.split(",").map(Number);
          const mean = total / count;
          return (
            <rect
              key={key}
              x={left + cx * w}
              y={size - (cy + 1) * h + 4}
              width={w - 1}
              height={h - 1}
              fill={color(mean)}
            >
              <title>
                {count} trials, mean {formatNumber(mean)}
              </title>
            </rect>
          );
        })}
        <rect x={left} y={4} width={size} height={size} fill="none" stroke="#999" />
        <AxisTicks axis={xAxis} along="x" at={(t) => left + middle(xAxis, t) * size} offset={size + 18} />
        <AxisTicks axis={yAxis} along="y" at={(t) => size - middle(yAxis, t) * size + 8} offset={left - 4} />
      </svg>
      <figcaption>
        {xAxis.name} × {yAxis.name}
      </figcaption>
    </figure>
  );
}

/**
 * An axis's tick labels: along x they sit centred at `offset` below the plot, along y right-aligned
 * at `offset` left of it; `at` places a tick's position (0..1 of the axis) on the chart.
 */
function AxisTicks({
  axis,
  along,
  at,
  offset,
}: {
  axis: Axis;
  along: "x" | "y";
  at: (position: number) => number;
  offset: number;
}) {
  return (
    <>
      {axis.ticks.map((tick) => (
        <text
          key={`${along}${tick.label}@${tick.at}`}
          x={along === "x" ? at(tick.at) : offset}
          y={along === "x" ? offset : at(tick.at)}
          textAnchor={along === "x" ? "middle" : "end"}
          className="tick"
        >
          {tick.label}
        </text>
      ))}
    </>
  );
}
