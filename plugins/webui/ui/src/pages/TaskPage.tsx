import { useState } from "react";
import { api } from "../api";
import { ErrorBox } from "../components/ErrorBox";
import { KillTask, OpenTask } from "../components/TaskActions";
import { DASH, durationSeconds, formatDate, formatDuration } from "../format";
import { stateClass } from "../states";
import { commandLine, TASK_TYPE_NAMES, TERMINATED, taskStateText } from "../tasks";
import { useData } from "../useData";
import { LogsPanel } from "./trial/LogsPanel";

const REFRESH_MS = 5000;

/** One task: what it runs, where, and its output (its trial's logs). */
export function TaskPage({ id }: { id: number }) {
  const [live, setLive] = useState(true);
  const answer = useData(() => api.task(id), `task:${id}`, live ? REFRESH_MS : null);
  const [actionError, setActionError] = useState<string | null>(null);

  const task = answer.data;
  if (task && live === (task.state === TERMINATED)) setLive(task.state !== TERMINATED);
  if (!task)
    return answer.error ? <ErrorBox error={answer.error} /> : <p className="muted">Loading task {id}…</p>;

  const done = (failure: string | null) => {
    setActionError(failure);
    answer.reload();
  };

  return (
    <section>
      <p className="crumbs">
        <a href="#/tasks">Tasks</a> / {task.id}
      </p>
      <h1 data-testid="task-name">
        {TASK_TYPE_NAMES[task.type]} {task.id} <span className="muted">{task.description}</span>
      </h1>
      <div className="summary">
        <span>
          State:{" "}
          <span className={stateClass(task.state)} data-testid="task-state">
            {taskStateText(task)}
          </span>
        </span>
        <span>Owner: {task.owner}</span>
        <span>
          Pool: {task.resource_pool} ({task.slots === 1 ? "1 slot" : `${task.slots} slots`}, priority{" "}
          {task.priority})
        </span>
        <span>Host: {task.host ?? DASH}</span>
        <span>Started: {formatDate(task.start_time)}</span>
        <span>Duration: {formatDuration(durationSeconds(task.start_time, task.end_time))}</span>
        <span>Exit code: {task.exit_code ?? DASH}</span>
        {task.idle_timeout !== null ? (
          <span>Stops after {formatDuration(task.idle_timeout)} idle</span>
        ) : null}
        {task.dag_id ? <span>DAG: {task.dag_id}</span> : null}
      </div>
      {task.command.length ? (
        <p>
          Runs <code className="command">{commandLine(task.command)}</code>
        </p>
      ) : null}
      {task.experiment_ids.length ? (
        <p>
          Shows{" "}
          {task.experiment_ids.map((e, i) => (
            <span key={e}>
              {i ? ", " : ""}
              <a href={`#/experiments/${e}`}>experiment {e}</a>
            </span>
          ))}{" "}
          ({task.trial_ids.length} trials)
        </p>
      ) : null}
      <div className="toolbar">
        <OpenTask task={task} onDone={done} />
        <KillTask task={task} onDone={done} />
        {live ? <span className="muted">Live: refreshes every {REFRESH_MS / 1000} s</span> : null}
      </div>
      <ErrorBox error={actionError ?? answer.error} />
      <h2>Logs</h2>
      {task.trial_id === null ? (
        <p className="muted">No logs yet: the task waits in the job queue.</p>
      ) : (
        <LogsPanel trialId={task.trial_id} />
      )}
    </section>
  );
}
