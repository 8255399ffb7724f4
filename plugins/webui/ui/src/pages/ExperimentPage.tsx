import { useState } from "react";
import { stringify } from "yaml";
import { api, errorText, type ExperimentAction } from "../api";
import { ConfirmDialog } from "../components/ConfirmDialog";
import { ErrorBox } from "../components/ErrorBox";
import { DASH, durationSeconds, formatDate, formatDuration, formatPercent } from "../format";
import { searcherInfo } from "../hparams";
import { canDo, isTerminal, stateClass } from "../states";
import { useData } from "../useData";
import { CheckpointsTab } from "./experiment/CheckpointsTab";
import { CurvesTab } from "./experiment/CurvesTab";
import { HparamsTab } from "./experiment/HparamsTab";
import { OpenTensorBoard } from "./experiment/OpenTensorBoard";
import { TrialsTab } from "./experiment/TrialsTab";

const REFRESH_MS = 5000;
const TABS = ["Trials", "Curves", "Hyperparameters", "Checkpoints", "Config"] as const;
type Tab = (typeof TABS)[number];
const ACTIONS: { action: ExperimentAction; label: string; confirm: boolean }[] = [
  { action: "pause", label: "Pause", confirm: false },
  { action: "activate", label: "Activate", confirm: false },
  { action: "cancel", label: "Cancel", confirm: true },
  { action: "kill", label: "Kill", confirm: true },
];

export function ExperimentPage({ id }: { id: number }) {
  const [live, setLive] = useState(true);
  const detail = useData(() => api.experiment(id), `experiment:${id}`, live ? REFRESH_MS : null);
  const checkpoints = useData(() => api.checkpoints(id), `checkpoints:${id}`, live ? REFRESH_MS : null);
  const [tab, setTab] = useState<Tab>("Trials");
  const [pending, setPending] = useState<ExperimentAction | null>(null);
  const [actionError, setActionError] = useState<string | null>(null);

  const experiment = detail.data?.experiment;
  if (experiment && live === isTerminal(experiment.state)) setLive(!isTerminal(experiment.state));

  const act = async (action: ExperimentAction) => {
    setPending(null);
    try {
      await api.experimentAction(id, action);
      setActionError(null);
    } catch (err) {
      setActionError(errorText(err));
    }
    detail.reload();
  };

  if (!detail.data) {
    return detail.error ? (
      <ErrorBox error={detail.error} />
    ) : (
      <p className="muted">Loading experiment {id}…</p>
    );
  }
  const { trials, config } = detail.data;
  const exp = detail.data.experiment;
  const searcher = searcherInfo(config);

  return (
    <section>
      <p className="crumbs">
        <a href="#/experiments">Experiments</a> / {exp.id}
      </p>
      <h1 data-testid="experiment-name">
        {exp.name} <span className="muted">#{exp.id}</span>
      </h1>
      <div className="summary">
        <span>
          State:{" "}
          <span className={stateClass(exp.state)} data-testid="experiment-state">
            {exp.state}
          </span>
        </span>
        <span>Progress: {formatPercent(exp.progress)}</span>
        <span>Searcher: {exp.searcher}</span>
        <span>
          Metric: {searcher.metric ?? DASH} (
          {searcher.smallerIsBetter ? "smaller is better" : "larger is better"})
        </span>
        <span>User: {exp.owner ?? DASH}</span>
        <span>Pool: {exp.resource_pool}</span>
        <span>Started: {formatDate(exp.start_time)}</span>
        <span>Duration: {formatDuration(durationSeconds(exp.start_time, exp.end_time))}</span>
        {exp.dag_id ? <span>DAG: {exp.dag_id}</span> : null}
        {exp.parent_id ? (
          <span>
            Continued from <a href={`#/experiments/${exp.parent_id}`}>experiment {exp.parent_id}</a>
          </span>
        ) : null}
      </div>
      {exp.description ? <p>{exp.description}</p> : null}
      {exp.error ? <p className="error">{exp.error}</p> : null}
      <div className="toolbar">
        {ACTIONS.map(({ action, label, confirm }) => (
          <button
            key={action}
            type="button"
            disabled={!canDo(action, exp.state)}
            onClick={() => (confirm ? setPending(action) : void act(action))}
            data-testid={`action-${action}`}
          >
            {label}
          </button>
        ))}
        {live ? <span className="muted">Live: refreshes every {REFRESH_MS / 1000} s</span> : null}
      </div>
      <div className="toolbar">
        <OpenTensorBoard experimentId={exp.id} trialIds={trials.map((t) => t.id)} />
      </div>
      <ErrorBox error={actionError ?? detail.error ?? checkpoints.error} />
      <div className="tabs" role="tablist">
        {TABS.map((name) => (
          <button
            key={name}
            type="button"
            role="tab"
            aria-selected={tab === name}
            className={tab === name ? "tab current" : "tab"}
            onClick={() => setTab(name)}
            data-testid={`tab-${name.toLowerCase()}`}
          >
            {name}
          </button>
        ))}
      </div>
      {tab === "Trials" ? (
        <TrialsTab trials={trials} checkpoints={checkpoints.data ?? []} searcher={searcher} />
      ) : null}
      {tab === "Curves" ? <CurvesTab experimentId={id} live={live} /> : null}
      {tab === "Hyperparameters" ? (
        <HparamsTab experimentId={id} trials={trials} searcher={searcher} config={config} />
      ) : null}
      {tab === "Checkpoints" ? <CheckpointsTab checkpoints={checkpoints.data ?? []} /> : null}
      {tab === "Config" ? <pre data-testid="config">{stringify(config, { lineWidth: 0 })}</pre> : null}
      {pending ? (
        <ConfirmDialog
          message={`${pending === "kill" ? "Kill" : "Cancel"} experiment ${exp.id} (${exp.name})?`}
          onConfirm={() => void act(pending)}
          onCancel={() => setPending(null)}
        />
      ) : null}
    </section>
  );
}
