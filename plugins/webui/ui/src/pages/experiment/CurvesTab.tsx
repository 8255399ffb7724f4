import { useMemo, useState } from "react";
import { api } from "../../api";
import { Chart, type ChartSeries } from "../../components/Chart";
import { ErrorBox } from "../../components/ErrorBox";
import { mutedColor, strongColor } from "../../colors";
import { useData } from "../../useData";

const REFRESH_MS = 5000;
export const X_AXES = {
  batches: "Batches",
  epochs: "Epochs",
  time: "Seconds since the trial's first report",
} as const;
export type XAxis = keyof typeof X_AXES;

/** Learning curves of every trial, one series each; the best trials are drawn on top, in strong colours. */
export function CurvesTab({ experimentId, live }: { experimentId: number; live: boolean }) {
  // "" asks the server for its default: the searcher metric of the validation group.
  const [choice, setChoice] = useState("");
  const [x, setX] = useState<XAxis>("batches");
  const [logY, setLogY] = useState(false);
  const [group, metric] = choice ? (choice.split(/:(.*)/s) as [string, string]) : ["validation", undefined];
  const curves = useData(
    () => api.curves(experimentId, { group, metric, x }),
    `curves:${experimentId}:${choice}:${x}`,
    live ? REFRESH_MS : null,
  );
  const answer = curves.data;

  const series = useMemo((): ChartSeries[] => {
    if (!answer) return [];
    const best = answer.best_trial_ids;
    const drawn = answer.series.filter((s) => s.x.length > 0);
    const others = drawn.filter((s) => !best.includes(s.trial_id));
    const top = best.flatMap((id) => drawn.filter((s) => s.trial_id === id));
    // Later series are painted over earlier ones, so the best come last.
    return [
      ...others.map((s) => ({ label: `trial ${s.trial_id}`, x: s.x, y: s.y, color: mutedColor(s.trial_id) })),
      ...top.map((s, i) => ({
        label: `trial ${s.trial_id}`,
        x: s.x,
        y: s.y,
        color: strongColor(i),
        width: 2,
      })),
    ];
  }, [answer]);
  // The legend of the best trials, in the colours and order the chart gives them.
  const best = useMemo(
    () =>
      (answer?.best_trial_ids ?? [])
        .filter((id) => answer?.series.some((s) => s.trial_id === id && s.x.length > 0))
        .map((id, i) => ({ trialId: id, label: `trial ${id}`, color: strongColor(i) })),
    [answer],
  );

  const selected = answer ? `${answer.group}:${answer.metric}` : choice;
  return (
    <div>
      <div className="filters">
        <label>
          Metric{" "}
          <select value={selected} onChange={(e) => setChoice(e.target.value)} data-testid="metric-select">
            {answer
              ? (["validation", "training"] as const).flatMap((g) =>
                  answer.metrics[g].map((name) => (
                    <option key={`${g}:${name}`} value={`${g}:${name}`}>
                      {name} ({g})
                    </option>
                  )),
                )
              : null}
            {answer && !(answer.metric !== null && answer.metrics[answer.group].includes(answer.metric)) ? (
              <option value={selected}>
                {answer.metric} ({answer.group})
              </option>
            ) : null}
          </select>
        </label>
        <label>
          X axis{" "}
          <select value={x} onChange={(e) => setX(e.target.value as XAxis)} data-testid="x-select">
            <option value="batches">Batches</option>
            <option value="epochs">Epochs</option>
            <option value="time">Time</option>
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
        {answer ? (
          <span className="muted">
            {series.length} trials ({answer.smaller_is_better ? "smaller is better" : "larger is better"});
            best:
            {best.length === 0 ? " none yet" : null}
          </span>
        ) : null}
        {best.map((s) => (
          <a key={s.label} href={`#/trials/${s.trialId}`} className="legend" style={{ color: s.color }}>
            ● #{s.trialId}
          </a>
        ))}
      </div>
      <ErrorBox error={curves.error} />
      <div data-testid="curves" data-series={series.length} data-metric={answer?.metric ?? ""}>
        {answer ? (
          <Chart
            series={series}
            xLabel={X_AXES[x]}
            yLabel={`${answer.group} ${answer.metric}`}
            logY={logY}
            height={420}
          />
        ) : curves.loading ? (
          <p className="muted">Loading curves…</p>
        ) : null}
      </div>
      {answer && series.length === 0 ? (
        <p className="muted">No trial has reported {answer.metric} yet.</p>
      ) : null}
    </div>
  );
}
