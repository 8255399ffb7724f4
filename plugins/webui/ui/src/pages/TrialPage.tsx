import { useMemo, useState } from "react";
import { api, errorText, type MetricsReport } from "../api";
import { Chart, type ChartSeries } from "../components/Chart";
import { ConfirmDialog } from "../components/ConfirmDialog";
import { ErrorBox } from "../components/ErrorBox";
import { RegisterCheckpoint } from "../components/RegisterCheckpoint";
import { continueTrial } from "../continueTrial";
import {
  DASH,
  durationSeconds,
  formatBytes,
  formatDate,
  formatDuration,
  formatNumber,
  formatValue,
} from "../format";
import { flattenHparams } from "../hparams";
import { navigate } from "../router";
import { isTrialTerminal, stateClass } from "../states";
import { useData } from "../useData";
import { LogsPanel } from "./trial/LogsPanel";

const REFRESH_MS = 5000;
const GROUP_COLORS: Record<string, string> = { training: "#1f77b4", validation: "#d62728" };

/** One chart per metric name, a series per group that reported it. */
function metricCharts(reports: MetricsReport[]): { metric: string; series: ChartSeries[] }[] {
  const byMetric = new Map<string, Map<string, { x: number[]; y: number[] }>>();
  for (const report of reports) {
    for (const [name, value] of Object.entries(report.metrics)) {
      if (typeof value !== "number" || !Number.isFinite(value)) continue;
      const groups = byMetric.get(name) ?? new Map();
      byMetric.set(name, groups);
      const points = groups.get(report.group) ?? { x: [], y: [] };
      groups.set(report.group, points);
      points.x.push(report.steps_completed);
      points.y.push(value);
    }
  }
  return [...byMetric.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([metric, groups]) => ({
      metric,
      series: [...groups.entries()].map(([group, points]) => ({
        label: group,
        ...points,
        color: GROUP_COLORS[group] ?? "#555",
        width: 2,
      })),
    }));
}

export function TrialPage({ id }: { id: number }) {
  const [live, setLive] = useState(true);
  const trial = useData(() => api.trial(id), `trial:${id}`, live ? REFRESH_MS : null);
  const metrics = useData(() => api.trialMetrics(id), `metrics:${id}`, live ? REFRESH_MS : null);
  const experimentId = trial.data?.experiment_id;
  const checkpoints = useData(
    () => (experimentId === undefined ? Promise.resolve([]) : api.checkpoints(experimentId)),
    `checkpoints:${experimentId}`,
    live ? REFRESH_MS : null,
  );
  const [confirming, setConfirming] = useState(false);
  const [continueError, setContinueError] = useState<string | null>(null);
  const [continuing, setContinuing] = useState(false);
  const charts = useMemo(() => metricCharts(metrics.data ?? []), [metrics.data]);

  const t = trial.data;
  if (t && live === isTrialTerminal(t.state)) setLive(!isTrialTerminal(t.state));
  if (!t)
    return trial.error ? <ErrorBox error={trial.error} /> : <p className="muted">Loading trial {id}…</p>;

  const hparams = flattenHparams(t.hparams);
  const ownCheckpoints = (checkpoints.data ?? []).filter((c) => c.trial_id === t.id);
  const startContinue = async () => {
    setConfirming(false);
    setContinuing(true);
    try {
      const created = await continueTrial(t);
      navigate(`/experiments/${created.id}`);
    } catch (err) {
      setContinueError(errorText(err));
    } finally {
      setContinuing(false);
    }
  };

  return (
    <section>
      <p className="crumbs">
        <a href="#/experiments">Experiments</a> /{" "}
        <a href={`#/experiments/${t.experiment_id}`}>{t.experiment_id}</a> / trial {t.id}
      </p>
      <h1>
        Trial {t.id} <span className="muted">of experiment {t.experiment_id}</span>
      </h1>
      <div className="summary">
        <span>
          State:{" "}
          <span className={stateClass(t.state)} data-testid="trial-state">
            {t.state}
          </span>
        </span>
        <span>Batches: {t.total_batches}</span>
        <span>Restarts: {t.restarts}</span>
        <span data-testid="trial-hosts">Hosts: {t.hosts?.length ? t.hosts.join(", ") : DASH}</span>
        <span>
          Best validation:{" "}
          {t.best_validation
            ? `${formatNumber(t.best_validation.metric)} @ ${t.best_validation.steps_completed}`
            : DASH}
        </span>
        <span>Started: {formatDate(t.start_time)}</span>
        <span>Duration: {formatDuration(durationSeconds(t.start_time, t.end_time))}</span>
      </div>
      <div className="toolbar">
        <button
          type="button"
          disabled={continuing}
          onClick={() => setConfirming(true)}
          data-testid="continue-trial"
        >
          {continuing ? "Creating…" : "Continue Trial"}
        </button>
      </div>
      <ErrorBox error={continueError ?? trial.error ?? metrics.error ?? checkpoints.error} />

      <h2>Hyperparameters</h2>
      <div className="scroll">
        <table className="grid compact" data-testid="hparams-table">
          <tbody>
            {Object.entries(hparams).map(([name, value]) => (
              <tr key={name}>
                <th>{name}</th>
                <td>{formatValue(value)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>

      <h2>Metrics</h2>
      {charts.length === 0 ? <p className="muted">No metrics reported yet.</p> : null}
      <div className="charts">
        {charts.map(({ metric, series }) => (
          <figure key={metric} className="metric-chart" data-testid="metric-chart" data-metric={metric}>
            <figcaption>
              {metric}{" "}
              {series.map((s) => (
                <span key={s.label} className="legend" style={{ color: s.color }}>
                  ● {s.label}
                </span>
              ))}
            </figcaption>
            <Chart series={series} xLabel="Batches" yLabel={metric} height={240} />
          </figure>
        ))}
      </div>

      <h2>Checkpoints</h2>
      {ownCheckpoints.length === 0 ? (
        <p className="muted">No checkpoints yet.</p>
      ) : (
        <div className="scroll">
          <table className="grid" data-testid="trial-checkpoints">
            <thead>
              <tr>
                <th>UUID</th>
                <th>Batches</th>
                <th>Size</th>
                <th>State</th>
                <th>Validation metric</th>
                <th>Reported</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {ownCheckpoints.map((c) => (
                <tr key={c.uuid} data-testid="checkpoint-row" data-id={c.uuid}>
                  <td className="mono">{c.uuid}</td>
                  <td>{c.steps_completed}</td>
                  <td>{formatBytes(c.size)}</td>
                  <td>{c.state}</td>
                  <td>{formatNumber(c.validation_metric)}</td>
                  <td>{formatDate(c.report_time)}</td>
                  <td>
                    <RegisterCheckpoint checkpoint={c} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}

      <h2>Logs</h2>
      <LogsPanel trialId={t.id} />
      {confirming ? (
        <ConfirmDialog
          message={`Create a new experiment that continues trial ${t.id} from its latest checkpoint, with its hyperparameters and a single-trial searcher?`}
          onConfirm={() => void startContinue()}
          onCancel={() => setConfirming(false)}
        />
      ) : null}
    </section>
  );
}
