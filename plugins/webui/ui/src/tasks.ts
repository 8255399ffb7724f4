import type { Job, Task, TaskType } from "./api";

// Mirrors det_airflow/master/tasks.py: the task types, which of them serve a page through the
// proxy, and the states a task passes through.

export const TASK_TYPES = [
  "command",
  "notebook",
  "tensorboard",
  "shell",
  "generic",
] as const satisfies readonly TaskType[];

export const TASK_TYPE_NAMES: Record<TaskType, string> = {
  command: "Command",
  notebook: "Notebook",
  tensorboard: "TensorBoard",
  shell: "Shell",
  generic: "Generic",
};

/** `det job list`'s types in words; every job type names its own row. */
export const JOB_TYPE_NAMES: Record<Job["type"], string> = {
  TYPE_EXPERIMENT: "Experiment",
  TYPE_COMMAND: "Command",
  TYPE_NOTEBOOK: "Notebook",
  TYPE_TENSORBOARD: "TensorBoard",
  TYPE_SHELL: "Shell",
  TYPE_GENERIC: "Generic",
};

export const TERMINATING = "TERMINATING";
export const TERMINATED = "TERMINATED";

/** Types with a web page behind the proxy; a shell serves a terminal that `det shell open` attaches to. */
export function servesPage(type: TaskType): boolean {
  return type === "notebook" || type === "tensorboard";
}

export function isTaskJob(job: Job): boolean {
  return job.type !== "TYPE_EXPERIMENT";
}

export function shellCommand(task: Pick<Task, "id">): string {
  return `det shell open ${task.id}`;
}

/** A command's argv as a shell would take it back: arguments quoted where they need it. */
export function commandLine(argv: string[]): string {
  return argv
    .map((arg) => (/^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`))
    .join(" ");
}

/** The task's state, with how it ended once it has. */
export function taskStateText(task: Pick<Task, "state" | "end_state">): string {
  return task.end_state ? `${task.state} (${task.end_state})` : task.state;
}

/**
 * Where the browser reaches the task's page. The master names it from Airflow's root
 * (/det/proxy/<id>/...); the pages live at <base>/det/ui/, so "../proxy/..." reaches it under any
 * base path, as api.ts reaches the API.
 */
export function taskHref(url: string): string {
  const relative = url.startsWith("/det/") ? `../${url.slice("/det/".length)}` : url;
  return new URL(relative, window.location.href).href;
}
