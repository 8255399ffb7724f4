import { useMemo, useRef, useState } from "react";
import { api, type Json, type Trial } from "../../api";
import { rankColor } from "../../colors";
import { ErrorBox } from "../../components/ErrorBox";
import { formatNumber, formatPercent } from "../../format";
import { flattenHparams, type HparamType, hparamNames, hparamTypes, type SearcherInfo } from "../../hparams";
import { type Axis, type AxisScale, makeAxis } from "../../scales";
import { useData } from "../../useData";

type Point = { trialId: number; hparams: Record<string, unknown>; metric: number; color: string };
/** A brushed range of a parallel-coordinates axis, as positions 0..1 along it. */
type Brush = [number, number];

const PAD = 48;
// Pairs of the first hyperparameters only: n names make n(n-1)/2 heat maps.
const HEATMAP_NAMES = 8;
// About how wide a character of an axis title is, to shorten titles that would overlap.
const CHAR_PX = 7;

const SCALES: Record<HparamType, AxisScale> = {
  const: "auto",
  int: "int",
  double: "linear",
  log: "log",
  categorical: "categorical",
  unknown: "auto",
};

function valueText(value: unknown): string {
  if (typeof value === "number") return formatNumber(value);
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

/** A title shortened to `chars` characters with an ellipsis; the full one is its tooltip. */
function shortened(text: string, chars: number): string {
  return text.length <= chars ? text : `${text.slice(0, Math.max(1, chars - 1))}…`;
}

/**
 * Where each trial's hyperparameters led: the importance of each hyperparameter (computed by the
 * master), parallel coordinates whose axes can be brushed to filter the trials below them, one
 * scatter per hyperparameter, and a heat map of the mean metric for each pair. Constants are listed
 * once above the views and left out of them; each axis follows the hyperparameter's declared type.
 */
export function HparamsTab({
  experimentId,
  trials,
  searcher,
  config,
}: {
  experimentId: number;
  trials: Trial[];
  searcher: SearcherInfo;
  config: Json;
}) {
  const names = useMemo(() => hparamNames(trials), [trials]);
  const types = useMemo(() => hparamTypes(config), [config]);
  const flat = useMemo(() => trials.map((t) => flattenHparams(t.hparams)), [trials]);
  const { varying, constants } = useMemo(() => {
    const varying: string[] = [];
    const constants: { name: string; value: unknown }[] = [];
    for (const name of names) {
      const distinct = new Set(flat.map((hparams) => JSON.stringify(hparams[name] ?? null)));
      if (types.get(name) === "const" || distinct.size <= 1)
        constants.push({ name, value: flat.find((h) => name in h)?.[name] });
      else varying.push(name);
    }
    return { varying, constants };
  }, [names, types, flat]);
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
  const [brushes, setBrushes] = useState<Record<string, Brush>>({});
  const metricName = `best ${searcher.metric ?? "metric"}`;
  const goodness = (metric: number) => {
    const values = points.map((p) => p.metric);
    const lo = Math.min(...values);
    const hi = Math.max(...values);
    const fraction = hi === lo ? 0 : (metric - lo) / (hi - lo);
    return searcher.smallerIsBetter ? fraction : 1 - fraction;
  };

  if (names.length === 0) return <p className="muted">This experiment has no hyperparameters.</p>;
  const constantList =
    constants.length > 0 ? (
      <p className="muted" data-testid="hp-constants">
        Constant:{" "}
        {constants.map(({ name, value }, i) => (
          <span key={name}>
            {i > 0 ? ", " : null}
            <code>{name}</code> = {typeof value === "number" ? String(value) : valueText(value)}
          </span>
        ))}
      </p>
    ) : null;
  if (points.length === 0)
    return (
      <div>
        {constantList}
        <p className="muted">No trial has reported {searcher.metric ?? "its searcher metric"} yet.</p>
      </div>
    );
  if (varying.length === 0)
    return (
      <div>
        {constantList}
        <p className="muted">Every hyperparameter has the same value in every trial.</p>
      </div>
    );
  const metricAxis = makeAxis(
    metricName,
    points.map((p) => p.metric),
    { continuous: true },
  );
  const axes = [
    ...varying.map((name) =>
      makeAxis(
        name,
        points.map((p) => p.hparams[name]),
        { scale: SCALES[types.get(name) ?? "unknown"] },
      ),
    ),
    metricAxis,
  ];
  const rows = points.map((p) => ({ ...p, values: [...varying.map((n) => p.hparams[n]), p.metric] }));
  const passes = (row: ParallelRow) =>
    axes.every((axis, i) => {
      const brush = brushes[axis.name];
      if (!brush) return true;
      const at = axis.position(row.values[i]);
      return at !== null && at >= brush[0] && at <= brush[1];
    });
  const selected = rows.filter(passes);
  const brushed = Object.keys(brushes).length > 0;

  return (
    <div>
      {constantList}
      <Importance experimentId={experimentId} scored={points.length} />
      <p className="muted">
        {points.length} trials with a {searcher.metric ?? "searcher metric"} value; green is better, red is
        worse. Drag along an axis to keep only the trials in that range; click it to clear.
      </p>
      <Parallel
        axes={axes}
        rows={rows}
        brushes={brushes}
        passes={passes}
        onBrush={(name, brush) =>
          setBrushes((current) => {
            const next = { ...current };
            if (brush) next[name] = brush;
            else delete next[name];
            return next;
          })
        }
      />
      <div className="toolbar">
        <span className="muted" data-testid="hp-selected">
          {brushed
            ? `${selected.length} of ${rows.length} trials in the brushed ranges`
            : `${rows.length} trials`}
        </span>
        <button
          type="button"
          disabled={!brushed}
          onClick={() => setBrushes({})}
          data-testid="hp-clear-brushes"
        >
          Clear filters
        </button>
      </div>
      <div className="scroll">
        <table data-testid="hp-trials">
          <thead>
            <tr>
              <th>Trial</th>
              <th title={metricName}>{metricName}</th>
              {varying.map((name) => (
                <th key={name} title={name}>
                  {name}
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {selected.map((row) => (
              <tr key={row.trialId} data-testid="hp-trial-row" data-trial={row.trialId}>
                <td>
                  <a href={`#/trials/${row.trialId}`}>{row.trialId}</a>
                </td>
                <td>{formatNumber(row.metric)}</td>
                {varying.map((name) => (
                  <td key={name}>{valueText(row.hparams[name])}</td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <div className="scatters">
        {varying.map((name, i) => (
          <Scatter
            key={name}
            xAxis={axes[i]}
            yAxis={metricAxis}
            points={points.map((p) => ({ ...p, x: p.hparams[name] }))}
          />
        ))}
      </div>
      {varying.length > 1 ? (
        <>
          <h3>Mean {searcher.metric ?? "metric"} by pairs of hyperparameters</h3>
          <div className="scatters">
            {varying.slice(0, HEATMAP_NAMES).flatMap((yName, j) =>
              varying.slice(0, j).map((xName, i) => (
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

/** Each hyperparameter's importance for the searcher's metric, as the master computes it. */
function Importance({ experimentId, scored }: { experimentId: number; scored: number }) {
  // Computed again when more trials have reported.
  const answer = useData(() => api.importance(experimentId), `importance:${experimentId}:${scored}`);
  if (!answer.data)
    return answer.error ? <ErrorBox error={answer.error} /> : <p className="muted">Computing importance…</p>;
  const { importances, evaluator, metric, note } = answer.data;
  if (importances.length === 0)
    return (
      <p className="muted" data-testid="hp-importance-note">
        Importance: {note}
      </p>
    );
  return (
    <figure className="importance">
      <figcaption>
        Importance for {metric}{" "}
        <span className="legend">({evaluator === "fanova" ? "fANOVA" : "PED-ANOVA"})</span>
      </figcaption>
      <ol data-testid="hp-importance">
        {importances.map(({ name, importance }) => (
          <li key={name} data-testid="importance-bar" data-hparam={name} data-importance={importance}>
            <span className="importance-name" title={name}>
              {name}
            </span>
            <span className="importance-track">
              <span className="importance-fill" style={{ width: `${importance * 100}%` }} />
            </span>
            <span className="importance-value">{formatPercent(importance)}</span>
          </li>
        ))}
      </ol>
    </figure>
  );
}

type ParallelRow = Point & { values: unknown[] };

type ParallelProps = {
  axes: Axis[];
  rows: ParallelRow[];
  brushes: Record<string, Brush>;
  passes: (row: ParallelRow) => boolean;
  onBrush: (name: string, brush: Brush | null) => void;
};

function Parallel({ axes, rows, brushes, passes, onBrush }: ParallelProps) {
  const width = Math.max(640, axes.length * 150);
  const height = 320;
  const spacing = (width - 2 * PAD) / Math.max(1, axes.length - 1);
  const titleChars = Math.max(6, Math.floor(spacing / CHAR_PX));
  const x = (i: number) => PAD + i * spacing;
  const y = (at: number) => height - PAD - at * (height - 2 * PAD);
  const svg = useRef<SVGSVGElement>(null);
  const [drag, setDrag] = useState<{ axis: number; from: number; to: number } | null>(null);
  const positionAt = (clientY: number) => {
    const top = svg.current?.getBoundingClientRect().top ?? 0;
    return Math.min(1, Math.max(0, (height - PAD - (clientY - top)) / (height - 2 * PAD)));
  };
  const shown = (i: number): Brush | null => {
    if (drag && drag.axis === i) return [Math.min(drag.from, drag.to), Math.max(drag.from, drag.to)];
    return brushes[axes[i].name] ?? null;
  };
  return (
    <div className="scroll">
      <svg
        ref={svg}
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
          const kept = passes(row);
          return (
            <polyline
              key={row.trialId}
              points={coords.join(" ")}
              fill="none"
              stroke={kept ? row.color : "var(--muted)"}
              strokeOpacity={kept ? 0.7 : 0.15}
              data-trial={row.trialId}
              data-kept={kept}
            >
              <title>
                trial {row.trialId}: {formatNumber(row.metric)}
              </title>
            </polyline>
          );
        })}
        {axes.map((axis, i) => {
          const brush = shown(i);
          return (
            <g key={axis.name} data-testid="hp-axis" data-axis={axis.name}>
              <line x1={x(i)} x2={x(i)} y1={y(0)} y2={y(1)} stroke="var(--fg)" />
              <text x={x(i)} y={PAD - 20} textAnchor="middle" className="axis-title">
                <title>{axis.name}</title>
                {shortened(axis.name, titleChars)}
              </text>
              {axis.ticks.map((tick) => (
                <text key={`${tick.label}@${tick.at}`} x={x(i) + 4} y={y(tick.at) + 4} className="tick">
                  {tick.label}
                </text>
              ))}
              {brush ? (
                <rect
                  className="brush"
                  x={x(i) - 6}
                  width={12}
                  y={y(brush[1])}
                  height={Math.max(2, y(brush[0]) - y(brush[1]))}
                />
              ) : null}
              <rect
                data-testid="hp-brush-area"
                x={x(i) - 12}
                width={24}
                y={y(1) - 4}
                height={y(0) - y(1) + 8}
                fill="transparent"
                style={{ cursor: "crosshair", touchAction: "none" }}
                tabIndex={0}
                role="button"
                aria-label={`Filter trials by ${axis.name}: arrow keys move a quarter-axis range, Escape clears`}
                onKeyDown={(event) => {
                  const current = brushes[axis.name];
                  const step = 0.125;
                  let next: Brush | null | undefined;
                  if (event.key === "ArrowUp" || event.key === "ArrowDown") {
                    const [lo, hi] = current ?? [0.375, 0.625];
                    const shift = current ? (event.key === "ArrowUp" ? step : -step) : 0;
                    const moved = Math.min(1 - (hi - lo), Math.max(0, lo + shift));
                    next = [moved, moved + (hi - lo)];
                  } else if (event.key === "Escape" || event.key === "Delete" || event.key === "Backspace") {
                    next = null;
                  }
                  if (next !== undefined) {
                    event.preventDefault();
                    onBrush(axis.name, next);
                  }
                }}
                onPointerDown={(event) => {
                  event.currentTarget.setPointerCapture(event.pointerId);
                  const at = positionAt(event.clientY);
                  setDrag({ axis: i, from: at, to: at });
                }}
                onPointerMove={(event) => {
                  if (drag && drag.axis === i) setDrag({ ...drag, to: positionAt(event.clientY) });
                }}
                onPointerUp={() => {
                  if (!drag || drag.axis !== i) return;
                  const lo = Math.min(drag.from, drag.to);
                  const hi = Math.max(drag.from, drag.to);
                  onBrush(axis.name, hi - lo < 0.01 ? null : [lo, hi]);
                  setDrag(null);
                }}
              >
                <title>
                  Drag to keep the trials in a range of {axis.name}; click to clear (keyboard: arrow keys,
                  Escape)
                </title>
              </rect>
            </g>
          );
        })}
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
