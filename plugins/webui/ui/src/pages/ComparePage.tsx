import { useMemo, useState } from "react";
import { api, type Curves, errorText, type Experiment, type ExperimentDetail, type Trial } from "../api";
import { strongColor } from "../colors";
import { COMPARE_MAX, COMPARE_MIN, configRows, thinned } from "../compare";
import { Chart, type ChartSeries } from "../components/Chart";
import { ErrorBox } from "../components/ErrorBox";
import { SortHeader } from "../components/SortHeader";
import { DASH, formatNumber, formatValue } from "../format";
import { flattenHparams, searcherInfo } from "../hparams";
import { useSorted } from "../sorting";
import { stateClass } from "../states";
import { useData } from "../useData";
import { HparamsTab } from "./experiment/HparamsTab";
import { X_AXES, type XAxis } from "./experiment/CurvesTab";

// Points drawn per trial at most (the chart is about that many pixels wide).
const DRAWN_POINTS = 1000;

/** The experiments compared and, when trials were chosen, which of their trials. */
type Selection = { details: ExperimentDetail[]; trialIds: Set<number> | null };
/** One experiment's curves, or why they could not be read; the others are drawn regardless. */
type ExperimentCurves = { experimentId: number; answer: Curves | null; error: string | null };

type Row = {
  trial: Trial;
  experiment: Experiment;
  color: string;
  metric: string | null;
  best: number | null;
  hparams: Record<string, unknown>;
};

function problem(experimentIds: number[], trialIds: number[]): string | null {
  if (trialIds.length > 0) {
    return trialIds.length < COMPARE_MIN ? `Choose at least ${COMPARE_MIN} trials to compare.` : null;
  }
  if (experimentIds.length < COMPARE_MIN || experimentIds.length > COMPARE_MAX) {
    return `Choose ${COMPARE_MIN} to ${COMPARE_MAX} experiments to compare (the link names ${experimentIds.length}).`;
  }
  return null;
}

async function loadSelection(experimentIds: number[], trialIds: number[]): Promise<Selection> {
  if (trialIds.length === 0) {
    return { details: await Promise.all(experimentIds.map((id) => api.experiment(id))), trialIds: null };
  }
  const trials = await Promise.all(trialIds.map((id) => api.trial(id)));
  const ids = [...new Set(trials.map((t) => t.experiment_id))];
  if (ids.length > COMPARE_MAX) {
    throw new Error(`The trials chosen belong to ${ids.length} experiments; compare at most ${COMPARE_MAX}.`);
  }
  return { details: await Promise.all(ids.map((id) => api.experiment(id))), trialIds: new Set(trialIds) };
}

/** Every experiment's curves at once, one request each; one that fails does not hide the rest. */
function loadCurves(ids: number[], params: { group: string; metric?: string; x: string }) {
  return Promise.all(
    ids.map((id): Promise<ExperimentCurves> =>
      // Every series at the same resolution: ten experiments' best trials whole would be tens of MB.
      api.curves(id, { ...params, keep_best: false }).then(
        (answer) => ({ experimentId: id, answer, error: null }),
        (err: unknown) => ({ experimentId: id, answer: null, error: `experiment ${id}: ${errorText(err)}` }),
      ),
    ),
  );
}

function sortValue(row: Row, key: string): unknown {
  if (key.startsWith("hp:")) return row.hparams[key.slice(3)];
  switch (key) {
    case "experiment":
      return row.experiment.id;
    case "metric":
      return row.metric;
    case "best":
      return row.best;
    default:
      return row.trial[key as keyof Trial];
  }
}

/**
 * Experiments (or chosen trials of them) side by side: their learning curves on one chart, a colour
 * per experiment and a line per trial; their configs with the differing settings marked; every
 * trial's hyperparameters and best metric in one table; and each experiment's hyperparameter views.
 * The URL holds the selection, so the page can be shared and reloaded.
 */
export function ComparePage({ experimentIds, trialIds }: { experimentIds: number[]; trialIds: number[] }) {
  const invalid = problem(experimentIds, trialIds);
  const selection = useData(
    () => (invalid ? Promise.resolve(null) : loadSelection(experimentIds, trialIds)),
    `compare:${experimentIds.join(",")}|${trialIds.join(",")}`,
  );
  // "" asks each experiment's server answer for its default: its own searcher metric.
  const [choice, setChoice] = useState("");
  const [x, setX] = useState<XAxis>("batches");
  const [logY, setLogY] = useState(false);
  const [onlyDifferences, setOnlyDifferences] = useState(false);
  const [showHparams, setShowHparams] = useState(false);
  const [group, metric] = choice ? (choice.split(/:(.*)/s) as [string, string]) : ["validation", undefined];

  // Experiments named in the URL are asked for their curves at once, beside their details.
  const curveIds = invalid
    ? null
    : trialIds.length > 0
      ? (selection.data?.details.map((d) => d.experiment.id) ?? null)
      : experimentIds;
  const curves = useData(
    () => (curveIds ? loadCurves(curveIds, { group, metric, x }) : Promise.resolve(null)),
    `compare-curves:${curveIds?.join(",") ?? "-"}:${choice}:${x}`,
  );

  const chosen = selection.data?.trialIds ?? null;
  const curveKey = curveIds?.join(",") ?? "";
  const colors = useMemo(
    () => new Map(curveKey ? curveKey.split(",").map((id, i) => [Number(id), strongColor(i)]) : []),
    [curveKey],
  );
  const series = useMemo((): ChartSeries[] => {
    return (curves.data ?? []).flatMap(({ experimentId, answer }) =>
      (answer?.series ?? [])
        .filter((s) => s.x.length > 0 && (!chosen || chosen.has(s.trial_id)))
        .map((s) => ({
          label: `experiment ${experimentId} trial ${s.trial_id}`,
          ...thinned(s.x, s.y, DRAWN_POINTS),
          color: colors.get(experimentId) ?? strongColor(0),
        })),
    );
  }, [curves.data, chosen, colors]);
  const answers = (curves.data ?? []).flatMap((c) => (c.answer ? [c.answer] : []));
  const options = [
    ...new Set(
      answers.flatMap((a) =>
        (["validation", "training"] as const).flatMap((g) => a.metrics[g].map((name) => `${g}:${name}`)),
      ),
    ),
  ];
  const shownMetrics = [...new Set(answers.map((a) => `${a.group} ${a.metric}`))];
  const curveErrors = (curves.data ?? []).flatMap((c) => (c.error ? [c.error] : []));

  const details = useMemo(() => selection.data?.details ?? [], [selection.data]);
  const rows = useMemo(
    (): Row[] =>
      details.flatMap((d) => {
        const { metric: searcherMetric } = searcherInfo(d.config);
        return d.trials
          .filter((t) => !chosen || chosen.has(t.id))
          .map((t) => ({
            trial: t,
            experiment: d.experiment,
            color: colors.get(d.experiment.id) ?? strongColor(0),
            metric: searcherMetric,
            best: t.best_validation?.metric ?? null,
            hparams: flattenHparams(t.hparams),
          }));
      }),
    [details, chosen, colors],
  );
  const names = useMemo(() => [...new Set(rows.flatMap((r) => Object.keys(r.hparams)))].sort(), [rows]);
  const { sorted, sort, toggle } = useSorted(rows, sortValue, { key: "experiment", descending: false });
  const config = useMemo(() => configRows(details.map((d) => d.config)), [details]);
  const shownConfig = onlyDifferences ? config.filter((r) => r.differs) : config;
  const header = (label: string, column: string) => (
    <SortHeader label={label} column={column} sort={sort} onSort={toggle} />
  );

  if (invalid) {
    return (
      <p className="error" data-testid="error">
        {invalid}
      </p>
    );
  }
  return (
    <section data-testid="compare-page">
      <p className="crumbs">
        <a href="#/experiments">Experiments</a> / Compare
      </p>
      <h1>
        Compare{" "}
        {chosen
          ? `${chosen.size} trials of ${details.length} experiment(s)`
          : `${experimentIds.length} experiments`}
      </h1>
      <ErrorBox error={selection.error ?? curves.error} />
      <div className="filters">
        {(curveIds ?? []).map((id) => {
          const experiment = details.find((d) => d.experiment.id === id)?.experiment;
          return (
            <a
              key={id}
              href={`#/experiments/${id}`}
              className="legend"
              style={{ color: colors.get(id) }}
              data-testid="compare-legend"
            >
              ● {id} {experiment?.name ?? ""}
            </a>
          );
        })}
      </div>

      <h2>Learning curves</h2>
      <div className="filters">
        <label>
          Metric{" "}
          <select value={choice} onChange={(e) => setChoice(e.target.value)} data-testid="metric-select">
            <option value="">Each experiment's searcher metric</option>
            {options.map((option) => {
              const [g, name] = option.split(/:(.*)/s);
              return (
                <option key={option} value={option}>
                  {name} ({g})
                </option>
              );
            })}
          </select>
        </label>
        <label>
          X axis{" "}
          <select value={x} onChange={(e) => setX(e.target.value as XAxis)} data-testid="x-select">
            {Object.keys(X_AXES).map((axis) => (
              <option key={axis} value={axis}>
                {axis[0].toUpperCase() + axis.slice(1)}
              </option>
            ))}
          </select>
        </label>
        <label className="check">
          <input
            type="checkbox"
            checked={logY}
            onChange={(e) => setLogY(e.target.checked)}
            data-testid="log-y"
          />
          Log scale
        </label>
        {curves.data ? <span className="muted">{series.length} trials</span> : null}
      </div>
      <ErrorBox error={curveErrors.length ? curveErrors.join("\n") : null} />
      <div
        data-testid="compare-curves"
        data-series={series.length}
        data-loaded={curves.data ? "true" : "false"}
      >
        {curves.data ? (
          <Chart
            series={series}
            xLabel={X_AXES[x]}
            yLabel={shownMetrics.join(" / ") || "metric"}
            logY={logY}
            height={420}
          />
        ) : curves.loading ? (
          <p className="muted">Loading curves…</p>
        ) : null}
      </div>

      <h2>Trials</h2>
      <div className="scroll">
        <table className="grid" data-testid="compare-trials-table">
          <thead>
            <tr>
              {header("Trial", "id")}
              {header("Experiment", "experiment")}
              {header("State", "state")}
              {header("Batches", "total_batches")}
              {header("Searcher metric", "metric")}
              {header("Best", "best")}
              {names.map((name) => (
                <SortHeader key={name} label={name} column={`hp:${name}`} sort={sort} onSort={toggle} />
              ))}
            </tr>
          </thead>
          <tbody>
            {sorted.map((row) => (
              <tr key={row.trial.id} data-testid="compare-trial-row" data-id={row.trial.id}>
                <td>
                  <a href={`#/trials/${row.trial.id}`}>{row.trial.id}</a>
                </td>
                <td>
                  <a href={`#/experiments/${row.experiment.id}`} style={{ color: row.color }}>
                    ● {row.experiment.id}
                  </a>
                </td>
                <td>
                  <span className={stateClass(row.trial.state)}>{row.trial.state}</span>
                </td>
                <td>{row.trial.total_batches}</td>
                <td>{row.metric ?? DASH}</td>
                <td>{formatNumber(row.best)}</td>
                {names.map((name) => (
                  <td key={name}>{formatValue(row.hparams[name])}</td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {!selection.data && selection.loading ? <p className="muted">Loading experiments…</p> : null}

      <h2>Configuration</h2>
      <div className="filters">
        <label className="check">
          <input
            type="checkbox"
            checked={onlyDifferences}
            onChange={(e) => setOnlyDifferences(e.target.checked)}
            data-testid="only-differences"
          />
          Only differences
        </label>
        <span className="muted">
          {config.filter((r) => r.differs).length} of {config.length} settings differ
        </span>
      </div>
      <div className="scroll">
        <table className="grid compact" data-testid="config-table">
          <thead>
            <tr>
              <th>Setting</th>
              {details.map((d) => (
                <th key={d.experiment.id} style={{ color: colors.get(d.experiment.id) }}>
                  Experiment {d.experiment.id}
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {shownConfig.map((row) => (
              <tr
                key={row.path}
                className={row.differs ? "differs" : ""}
                data-testid="config-row"
                data-path={row.path}
                data-differs={String(row.differs)}
              >
                <td className="mono">{row.path}</td>
                {row.values.map((value, i) => (
                  <td key={details[i].experiment.id} className="mono">
                    {value ?? DASH}
                  </td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
      </div>

      <h2>Hyperparameters</h2>
      <div className="toolbar">
        <button type="button" onClick={() => setShowHparams(!showHparams)} data-testid="toggle-hparams">
          {showHparams ? "Hide" : "Show"} each experiment's hyperparameter views
        </button>
      </div>
      {showHparams
        ? details.map((d) => (
            <div key={d.experiment.id} data-testid="compare-hparams" data-id={d.experiment.id}>
              <h3 style={{ color: colors.get(d.experiment.id) }}>
                Experiment {d.experiment.id} {d.experiment.name}
              </h3>
              <HparamsTab
                experimentId={d.experiment.id}
                trials={d.trials.filter((t) => !chosen || chosen.has(t.id))}
                searcher={searcherInfo(d.config)}
                config={d.config}
              />
            </div>
          ))
        : null}
    </section>
  );
}
