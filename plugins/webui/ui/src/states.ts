import type { Experiment, ExperimentAction } from "./api";

// Mirrors det_airflow/states.py and the master's allowed transitions (experiments._TRANSITIONS).

export const EXPERIMENT_STATES = [
  "ACTIVE",
  "PAUSED",
  "STOPPING_COMPLETED",
  "STOPPING_CANCELED",
  "STOPPING_KILLED",
  "STOPPING_ERROR",
  "COMPLETED",
  "CANCELED",
  "ERROR",
  "DELETING",
] as const satisfies readonly Experiment["state"][];

const TERMINAL = new Set(["COMPLETED", "CANCELED", "ERROR", "DELETED"]);
const TERMINAL_TRIAL = new Set(["COMPLETED", "CANCELED", "ERROR"]);

const ALLOWED: Record<ExperimentAction, (state: string) => boolean> = {
  pause: (state) => state === "ACTIVE",
  activate: (state) => state === "PAUSED",
  cancel: (state) => state === "ACTIVE" || state === "PAUSED",
  kill: (state) => state === "ACTIVE" || state === "PAUSED" || state === "STOPPING_CANCELED",
  archive: (state) => TERMINAL.has(state),
  unarchive: () => true,
};

export function isTerminal(state: string): boolean {
  return TERMINAL.has(state);
}

export function isTrialTerminal(state: string): boolean {
  return TERMINAL_TRIAL.has(state);
}

export function canDo(action: ExperimentAction, state: string): boolean {
  return ALLOWED[action](state);
}

export function stateClass(state: string): string {
  if (["ACTIVE", "PULLING", "STARTING", "RUNNING"].includes(state)) return "state state-active";
  if (state === "COMPLETED") return "state state-done";
  if (state === "ERROR" || state.endsWith("KILLED")) return "state state-error";
  if (state.startsWith("STOPPING") || ["PAUSED", "QUEUED", "TERMINATING"].includes(state))
    return "state state-waiting";
  return "state";
}
