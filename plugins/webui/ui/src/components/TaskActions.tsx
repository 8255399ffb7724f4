import { useState } from "react";
import { api, errorText, type Task } from "../api";
import { openTab } from "../newTab";
import { servesPage, shellCommand, TASK_TYPE_NAMES, TERMINATED, taskHref } from "../tasks";
import { ConfirmDialog } from "./ConfirmDialog";

type Report = (failure: string | null) => void;

/**
 * How to reach a task's server: an Open button for a page that answers, or for a shell the
 * command that attaches a terminal to it. Nothing while there is nothing to reach.
 */
export function OpenTask({ task, onDone }: { task: Task; onDone: Report }) {
  if (task.type === "shell") {
    if (task.state === TERMINATED) return null;
    return (
      <code className="command" title="Run in a terminal to attach to the shell" data-testid="shell-command">
        {shellCommand(task)}
      </code>
    );
  }
  if (!servesPage(task.type) || !task.ready || !task.url) return null;
  const url = task.url;
  return (
    <button
      type="button"
      onClick={() =>
        onDone(openTab(taskHref(url)) ? null : `the browser did not open a new tab for ${taskHref(url)}`)
      }
      data-testid="task-open"
    >
      Open
    </button>
  );
}

/** Kill, after asking; the task's slots go back to the queue. */
export function KillTask({ task, onDone }: { task: Task; onDone: Report }) {
  const [confirming, setConfirming] = useState(false);
  const [busy, setBusy] = useState(false);
  if (task.state === TERMINATED) return null;

  const kill = async () => {
    setConfirming(false);
    setBusy(true);
    try {
      await api.killTask(task.id);
      onDone(null);
    } catch (err) {
      onDone(`task ${task.id}: ${errorText(err)}`);
    } finally {
      setBusy(false);
    }
  };

  return (
    <>
      <button type="button" disabled={busy} onClick={() => setConfirming(true)} data-testid="task-kill">
        Kill
      </button>
      {confirming ? (
        <ConfirmDialog
          message={`Kill task ${task.id} (${TASK_TYPE_NAMES[task.type]}: ${task.description})?`}
          onConfirm={() => void kill()}
          onCancel={() => setConfirming(false)}
        />
      ) : null}
    </>
  );
}
