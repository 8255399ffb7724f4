// Typed calls to the det master's JSON API. The pages live at <base>/det/ui/, so "../api/v1" reaches
// the master under any base path, and the browser sends Airflow's login cookie with each call.

const BASE = "../api/v1";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export type Json = Record<string, unknown>;

export type Experiment = {
  id: number;
  name: string;
  owner: string | null;
  description: string | null;
  labels: string[];
  state: string;
  progress: number | null;
  start_time: string | null;
  end_time: string | null;
  parent_id: number | null;
  resource_pool: string;
  searcher: string;
  archived: boolean;
  dag_id: string | null;
  dag_run_id: string | null;
  error: string | null;
  num_trials: number | null;
  // Present when the master reports the searcher metric and the best value in the list.
  searcher_metric?: string | null;
  best_validation?: number | null;
};

export type Trial = {
  id: number;
  experiment_id: number;
  state: string;
  hparams: Json;
  start_time: string | null;
  end_time: string | null;
  total_batches: number;
  restarts: number;
  progress: number | null;
  latest_checkpoint: string | null;
  best_validation: { metric: number; steps_completed: number } | null;
  summary_metrics: Record<string, Record<string, unknown>>;
};

export type ExperimentDetail = { experiment: Experiment; trials: Trial[]; config: Json };

export type Checkpoint = {
  uuid: string;
  trial_id: number;
  experiment_id: number;
  steps_completed: number;
  state: string;
  size: number | null;
  report_time: string | null;
  validation_metric: number | null;
  resources: Record<string, number> | null;
};

export type MetricsReport = {
  trial_id: number;
  group: string;
  steps_completed: number;
  metrics: Record<string, unknown>;
  report_time: string | null;
};

export type LogLine = {
  id: number;
  trial_id: number;
  timestamp: string | null;
  rank: number | null;
  level: string | null;
  stdtype: string | null;
  message: string;
};

export type LogQuery = {
  after?: number;
  tail?: number;
  limit?: number;
  rank?: string;
  level?: string;
  search?: string;
};

/** Log levels from least to most severe (det_airflow/cli/logs.py LEVELS). */
export const LOG_LEVELS = ["TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] as const;

export type Job = {
  jobs_ahead: number;
  id: number;
  name: string | null;
  priority: number;
  weight: number;
  max_slots: number | null;
  submitted: string | null;
  acquired_slots: number;
  needed_slots: number;
  slots_per_trial: number;
  state: string;
  fits_pool: boolean;
  user: string | null;
  resource_pool: string;
  experiment_state: string;
};

export type CurveSeries = {
  trial_id: number;
  state: string;
  hparams: Json;
  points: number;
  x: number[];
  y: number[];
};

export type Curves = {
  group: string;
  metric: string;
  x: string;
  metrics: { training: string[]; validation: string[] };
  smaller_is_better: boolean;
  best_trial_ids: number[];
  series: CurveSeries[];
};

export type JobChange =
  | { priority: number }
  | { weight: number }
  | { resource_pool: string }
  | { ahead_of: number }
  | { behind_of: number };

export type ExperimentAction = "pause" | "activate" | "cancel" | "kill" | "archive" | "unarchive";

function query(params: Record<string, string | number | boolean | null | undefined>): string {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") search.set(key, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

/** The server's own words for a failure: FastAPI's `detail`, a string or a list of field errors. */
function describe(status: number, body: unknown): string {
  const detail = (body as { detail?: unknown } | null)?.detail;
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail
      .map((item: { loc?: unknown[]; msg?: string }) =>
        item.loc ? `${item.loc.filter((part) => part !== "body").join(".")}: ${item.msg}` : String(item.msg),
      )
      .join("; ");
  }
  if (status === 401 || status === 403) return `not allowed (HTTP ${status}): log in to Airflow again`;
  return `the det master answered HTTP ${status}`;
}

async function request<T>(method: string, path: string, body?: unknown): Promise<T> {
  const response = await fetch(`${BASE}${path}`, {
    method,
    credentials: "same-origin",
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let parsed: unknown = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (!response.ok) throw new ApiError(response.status, describe(response.status, parsed));
  return parsed as T;
}

export const api = {
  experiments: (all: boolean) =>
    request<{ experiments: Experiment[] }>("GET", `/experiments${query({ all })}`).then((r) => r.experiments),
  experiment: (id: number) => request<ExperimentDetail>("GET", `/experiments/${id}`),
  experimentConfig: (id: number) =>
    request<{ config: Json }>("GET", `/experiments/${id}/config`).then((r) => r.config),
  checkpoints: (id: number) =>
    request<{ checkpoints: Checkpoint[] }>("GET", `/experiments/${id}/checkpoints`).then(
      (r) => r.checkpoints,
    ),
  curves: (id: number, params: { group: string; metric?: string; x: string; points?: number }) =>
    request<Curves>("GET", `/experiments/${id}/curves${query(params)}`),
  experimentAction: (id: number, action: ExperimentAction) =>
    request<{ experiment: Experiment }>("POST", `/experiments/${id}/${action}`).then((r) => r.experiment),
  experimentContext: async (id: number): Promise<Blob> => {
    const response = await fetch(`${BASE}/experiments/${id}/context`, { credentials: "same-origin" });
    if (!response.ok) {
      const body = await response.json().catch(() => null);
      throw new ApiError(response.status, describe(response.status, body));
    }
    return response.blob();
  },
  createExperiment: (body: { config: string; context: string | null; parent_id?: number }) =>
    request<{ experiment: Experiment; warnings: string[] }>("POST", "/experiments", body),
  trial: (id: number) => request<{ trial: Trial }>("GET", `/trials/${id}`).then((r) => r.trial),
  trialMetrics: (id: number) =>
    request<{ metrics: MetricsReport[] }>("GET", `/trials/${id}/metrics`).then((r) => r.metrics),
  /** `rank`, `level` (that level or higher) and `search` filter as `det trial logs` does. */
  trialLogs: (id: number, params: LogQuery) =>
    request<{ logs: LogLine[]; trial_state: string }>("GET", `/trials/${id}/logs${query(params)}`),
  jobs: () => request<{ jobs: Job[] }>("GET", "/jobs").then((r) => r.jobs),
  updateJob: (jobId: number, change: JobChange) =>
    request<{ jobs: unknown[] }>("POST", "/jobs/update", { updates: [{ job_id: jobId, ...change }] }),
  resolve: (params: { dag_id: string; run_id?: string; map_index?: string }) =>
    request<{ experiment_id: number; trial_id: number | null }>("GET", `/ui/resolve${query(params)}`),
};

export function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
