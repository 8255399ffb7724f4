import { useEffect, useState } from "react";
import { api } from "../api";
import { ErrorBox } from "../components/ErrorBox";
import { taskToOpen } from "../newTab";
import { navigate } from "../router";
import { servesPage, shellCommand, TASK_TYPE_NAMES, TERMINATED, taskHref } from "../tasks";
import { useData } from "../useData";

const POLL_MS = 1000;
// How long a waiting tab listens before it says that nothing came.
const WAIT_MS = 60_000;

/** A tab of its own for a task: waits until the task serves its page, then becomes that page. */
export function OpenTaskPage({ id }: { id: number }) {
  const [waiting, setWaiting] = useState(true);
  const answer = useData(() => api.task(id), `open-task:${id}`, waiting ? POLL_MS : null);
  const task = answer.data;
  const ended = task?.state === TERMINATED;
  const reachable = task !== undefined && servesPage(task.type) && task.ready && task.url !== null;
  if (waiting && task && (ended || reachable || !servesPage(task.type))) setWaiting(false);

  useEffect(() => {
    if (reachable && task.url) window.location.replace(taskHref(task.url));
  }, [reachable, task?.url]);

  if (!task)
    return answer.error ? <ErrorBox error={answer.error} /> : <p className="muted">Looking up task {id}…</p>;
  const name = `${TASK_TYPE_NAMES[task.type]} ${task.id}`;
  const logs = (
    <a href={`#/tasks/${task.id}`} data-testid="task-link">
      its page and logs
    </a>
  );
  if (task.type === "shell")
    return (
      <p>
        A shell opens in a terminal: <code className="command">{shellCommand(task)}</code> (see {logs}).
      </p>
    );
  if (!servesPage(task.type)) return <ErrorBox error={`${name} is a command: it serves no page`} />;
  if (ended)
    return (
      <>
        <ErrorBox error={`${name} ended (${task.end_state ?? TERMINATED}) before it served its page.`} />
        <p>See {logs}.</p>
      </>
    );
  return (
    <>
      <p data-testid="open-task-status">
        {reachable ? `Opening ${name}…` : `Waiting for ${name} to start: ${task.state}…`} (see {logs})
      </p>
      <ErrorBox error={answer.error} />
    </>
  );
}

/** A tab opened before its task was known: the page that opened it sends the task's id. */
export function OpeningPage() {
  const [gaveUp, setGaveUp] = useState(false);
  useEffect(() => {
    const receive = (event: MessageEvent) => {
      const id = taskToOpen(event);
      if (id !== null) navigate(`/tasks/${id}/open`, true);
    };
    window.addEventListener("message", receive);
    const timer = window.setTimeout(() => setGaveUp(true), WAIT_MS);
    return () => {
      window.removeEventListener("message", receive);
      window.clearTimeout(timer);
    };
  }, []);
  return gaveUp ? (
    <p className="muted" data-testid="open-task-status">
      Nothing to open here: the page that opened this tab did not start its task. See the{" "}
      <a href="#/tasks">tasks</a>.
    </p>
  ) : (
    <p className="muted" data-testid="open-task-status">
      Starting…
    </p>
  );
}
