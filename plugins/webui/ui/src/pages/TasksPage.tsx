import { useState } from "react";
import { api, type Task, type TaskType } from "../api";
import { ErrorBox } from "../components/ErrorBox";
import { SortHeader } from "../components/SortHeader";
import { KillTask, OpenTask } from "../components/TaskActions";
import { DASH, formatDate } from "../format";
import { useSorted } from "../sorting";
import { stateClass } from "../states";
import { TASK_TYPE_NAMES, TASK_TYPES, taskStateText } from "../tasks";
import { useData } from "../useData";

const REFRESH_MS = 5000;

function sortValue(task: Task, key: string): unknown {
  return key === "type" ? TASK_TYPE_NAMES[task.type] : task[key as keyof Task];
}

/** Every task the user may read (`det task list --all`): notebooks, TensorBoards, commands, shells. */
export function TasksPage() {
  const [type, setType] = useState<TaskType | "">("");
  const list = useData(() => api.tasks({ all: true, type: type || undefined }), `tasks:${type}`, REFRESH_MS);
  const [error, setError] = useState<string | null>(null);
  const { sorted, sort, toggle } = useSorted(list.data ?? [], sortValue, { key: "id", descending: true });

  const done = (failure: string | null) => {
    setError(failure);
    list.reload();
  };
  const header = (label: string, column: string) => (
    <SortHeader label={label} column={column} sort={sort} onSort={toggle} />
  );

  return (
    <section>
      <h1>Tasks</h1>
      <div className="filters">
        <select
          value={type}
          onChange={(e) => setType(e.target.value as TaskType | "")}
          data-testid="filter-task-type"
        >
          <option value="">All types</option>
          {TASK_TYPES.map((t) => (
            <option key={t} value={t}>
              {TASK_TYPE_NAMES[t]}
            </option>
          ))}
        </select>
        <span className="muted">Live: refreshes every {REFRESH_MS / 1000} s</span>
      </div>
      <ErrorBox error={error ?? list.error} />
      <div className="scroll">
        <table className="grid" data-testid="tasks-table">
          <thead>
            <tr>
              {header("ID", "id")}
              {header("Type", "type")}
              {header("Description", "description")}
              {header("Owner", "owner")}
              {header("State", "state")}
              {header("Slots", "slots")}
              {header("Pool", "resource_pool")}
              {header("Started", "start_time")}
              {header("Exit code", "exit_code")}
              <th />
            </tr>
          </thead>
          <tbody>
            {sorted.map((task) => (
              <tr key={task.id} data-testid="task-row" data-id={task.id}>
                <td>
                  <a href={`#/tasks/${task.id}`}>{task.id}</a>
                </td>
                <td data-testid="task-type">{TASK_TYPE_NAMES[task.type]}</td>
                <td>{task.description}</td>
                <td data-testid="task-owner">{task.owner}</td>
                <td>
                  <span className={stateClass(task.state)} data-testid="task-state">
                    {taskStateText(task)}
                  </span>
                </td>
                <td>{task.slots}</td>
                <td>{task.resource_pool}</td>
                <td>{formatDate(task.start_time)}</td>
                <td data-testid="task-exit-code">{task.exit_code ?? DASH}</td>
                <td>
                  <div className="row-actions">
                    <OpenTask task={task} onDone={done} />
                    <KillTask task={task} onDone={done} />
                    <a href={`#/tasks/${task.id}`} data-testid="task-logs">
                      Logs
                    </a>
                  </div>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {list.data && sorted.length === 0 ? (
        <p className="muted">{type ? `No ${TASK_TYPE_NAMES[type]} tasks.` : "No tasks."}</p>
      ) : null}
      {!list.data && list.loading ? <p className="muted">Loading…</p> : null}
    </section>
  );
}
