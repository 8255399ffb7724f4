// Typed calls to the det master's JSON API. The pages live at <base>/det/ui/, so "../api/v1" reaches
// the master under any base path, and the browser sends Airflow's login cookie with each call.

import type { components, paths } from "./generated/api";

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

// The master's answers and bodies come from its OpenAPI document (src/generated/, `make api-types`),
// so a changed route fails the type check here instead of at run time in a browser.
type Schemas = components["schemas"];
type Method = "get" | "post" | "patch" | "delete";

/** What a route answers with 200, as the master's OpenAPI document declares it (a type with no
 * fields where the route has no such method or answer, so that using it fails the check). */
type Answer<Path extends keyof paths, M extends Method> = paths[Path][M] extends {
  responses: { 200: { content: { "application/json": infer T } } };
}
  ? T
  : { [noJsonAnswer]: never };
declare const noJsonAnswer: unique symbol;

export type Experiment = Schemas["Experiment"];
export type Trial = Schemas["Trial"];
export type ExperimentDetail = Schemas["ExperimentDetail"];
export type Checkpoint = Schemas["Checkpoint"];
export type MetricsReport = Schemas["Metrics"];
export type LogLine = Schemas["LogLine"];
export type Job = Schemas["Job"];
export type CurveSeries = Schemas["CurveSeries"];
export type Curves = Schemas["Curves"];
export type Task = Schemas["Task"];
export type TaskType = Task["type"];
export type Model = Schemas["Model"];
export type ModelVersion = Schemas["ModelVersion"];
export type Workspace = Schemas["Workspace"];
export type Project = Schemas["Project"];
export type Webhook = Schemas["Webhook"];
export type WebhookDelivery = Schemas["WebhookDelivery"];
export type WebhookTrigger = Schemas["WebhookTrigger"];
export type CreateWebhook = Schemas["CreateWebhook"];

// Hand-written: the page's filters as the strings its inputs hold, sent as query parameters.
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

// Hand-written: an update makes exactly one of these changes, which the schema (all optional) cannot say.
export type JobChange =
  | { priority: number }
  | { weight: number }
  | { resource_pool: string }
  | { ahead_of: number }
  | { behind_of: number };

// Hand-written: the route's `action` is a plain string in the schema; the master checks these names.
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
    request<Answer<"/api/v1/experiments", "get">>("GET", `/experiments${query({ all })}`).then(
      (r) => r.experiments,
    ),
  experiment: (id: number) =>
    request<Answer<"/api/v1/experiments/{experiment_id}", "get">>("GET", `/experiments/${id}`),
  experimentConfig: (id: number) =>
    request<Answer<"/api/v1/experiments/{experiment_id}/config", "get">>(
      "GET",
      `/experiments/${id}/config`,
    ).then((r) => r.config),
  checkpoints: (id: number) =>
    request<Answer<"/api/v1/experiments/{experiment_id}/checkpoints", "get">>(
      "GET",
      `/experiments/${id}/checkpoints`,
    ).then((r) => r.checkpoints),
  /** `keep_best: false` downsamples the best trials' series too (many experiments on one chart). */
  curves: (
    id: number,
    params: { group: string; metric?: string; x: string; points?: number; keep_best?: boolean },
  ) =>
    request<Answer<"/api/v1/experiments/{experiment_id}/curves", "get">>(
      "GET",
      `/experiments/${id}/curves${query(params)}`,
    ),
  importance: (id: number, params: { metric?: string } = {}) =>
    request<Answer<"/api/v1/experiments/{experiment_id}/hyperparameter-importance", "get">>(
      "GET",
      `/experiments/${id}/hyperparameter-importance${query(params)}`,
    ),
  experimentAction: (id: number, action: ExperimentAction) =>
    request<Answer<"/api/v1/experiments/{experiment_id}/{action}", "post">>(
      "POST",
      `/experiments/${id}/${action}`,
    ).then((r) => r.experiment),
  experimentContext: async (id: number): Promise<Blob> => {
    const response = await fetch(`${BASE}/experiments/${id}/context`, { credentials: "same-origin" });
    if (!response.ok) {
      const body = await response.json().catch(() => null);
      throw new ApiError(response.status, describe(response.status, body));
    }
    return response.blob();
  },
  createExperiment: (body: Schemas["CreateExperiment"]) =>
    request<Answer<"/api/v1/experiments", "post">>("POST", "/experiments", body),
  trial: (id: number) =>
    request<Answer<"/api/v1/trials/{trial_id}", "get">>("GET", `/trials/${id}`).then((r) => r.trial),
  trialMetrics: (id: number) =>
    request<Answer<"/api/v1/trials/{trial_id}/metrics", "get">>("GET", `/trials/${id}/metrics`).then(
      (r) => r.metrics,
    ),
  /** `rank`, `level` (that level or higher) and `search` filter as `det trial logs` does. */
  trialLogs: (id: number, params: LogQuery) =>
    request<Answer<"/api/v1/trials/{trial_id}/logs", "get">>("GET", `/trials/${id}/logs${query(params)}`),
  jobs: () => request<Answer<"/api/v1/jobs", "get">>("GET", "/jobs").then((r) => r.jobs),
  updateJob: (jobId: number, change: JobChange) => {
    const body: Schemas["JobUpdates"] = { updates: [{ job_id: jobId, ...change }] };
    return request<Answer<"/api/v1/jobs/update", "post">>("POST", "/jobs/update", body);
  },
  tasks: (params: { type?: TaskType; all?: boolean }) =>
    request<Answer<"/api/v1/tasks", "get">>("GET", `/tasks${query(params)}`).then((r) => r.tasks),
  task: (id: number) =>
    request<Answer<"/api/v1/tasks/{task_id}", "get">>("GET", `/tasks/${id}`).then((r) => r.task),
  createTask: (body: Schemas["CreateTask"]) =>
    request<Answer<"/api/v1/tasks", "post">>("POST", "/tasks", body).then((r) => r.task),
  killTask: (id: number) =>
    request<Answer<"/api/v1/tasks/{task_id}/kill", "post">>("POST", `/tasks/${id}/kill`).then((r) => r.task),
  models: () => request<Answer<"/api/v1/models", "get">>("GET", "/models").then((r) => r.models),
  createModel: (body: Schemas["CreateModel"]) =>
    request<Answer<"/api/v1/models", "post">>("POST", "/models", body).then((r) => r.model),
  updateModel: (name: string, body: Schemas["PatchModel"]) =>
    request<Answer<"/api/v1/models/{name}", "patch">>(
      "PATCH",
      `/models/${encodeURIComponent(name)}`,
      body,
    ).then((r) => r.model),
  archiveModel: (name: string, archived: boolean) =>
    request<Answer<"/api/v1/models/{name}/archive", "post">>(
      "POST",
      `/models/${encodeURIComponent(name)}/${archived ? "archive" : "unarchive"}`,
    ).then((r) => r.model),
  /** The model and its versions, oldest first. */
  modelVersions: (name: string) =>
    request<Answer<"/api/v1/models/{name}/versions", "get">>(
      "GET",
      `/models/${encodeURIComponent(name)}/versions`,
    ),
  registerVersion: (name: string, body: Schemas["RegisterVersion"]) =>
    request<Answer<"/api/v1/models/{name}/versions", "post">>(
      "POST",
      `/models/${encodeURIComponent(name)}/versions`,
      body,
    ).then((r) => r.model_version),
  workspaces: () =>
    request<Answer<"/api/v1/workspaces", "get">>("GET", "/workspaces").then((r) => r.workspaces),
  createWorkspace: (name: string) =>
    request<Answer<"/api/v1/workspaces", "post">>("POST", "/workspaces", { name }).then((r) => r.workspace),
  /** The workspace and its projects. */
  projects: (workspaceId: number) =>
    request<Answer<"/api/v1/workspaces/{workspace_id}/projects", "get">>(
      "GET",
      `/workspaces/${workspaceId}/projects`,
    ),
  createProject: (workspaceId: number, body: Schemas["CreateProject"]) =>
    request<Answer<"/api/v1/workspaces/{workspace_id}/projects", "post">>(
      "POST",
      `/workspaces/${workspaceId}/projects`,
      body,
    ).then((r) => r.project),
  project: (id: number) =>
    request<Answer<"/api/v1/projects/{project_id}", "get">>("GET", `/projects/${id}`).then((r) => r.project),
  updateProject: (id: number, body: Schemas["PatchProject"]) =>
    request<Answer<"/api/v1/projects/{project_id}", "patch">>("PATCH", `/projects/${id}`, body).then(
      (r) => r.project,
    ),
  projectExperiments: (id: number, all: boolean) =>
    request<Answer<"/api/v1/projects/{project_id}/experiments", "get">>(
      "GET",
      `/projects/${id}/experiments${query({ all })}`,
    ).then((r) => r.experiments),
  /** Who the pages act as; `admin` where the master says so (absent: treated as not an admin). */
  me: () => request<Answer<"/api/v1/me", "get">>("GET", "/me"),
  webhooks: () => request<Answer<"/api/v1/webhooks", "get">>("GET", "/webhooks").then((r) => r.webhooks),
  /** The answer is the only one that carries the webhook's signing key. */
  createWebhook: (body: CreateWebhook) =>
    request<Answer<"/api/v1/webhooks", "post">>("POST", "/webhooks", body).then((r) => r.webhook),
  deleteWebhook: (id: number) =>
    request<Answer<"/api/v1/webhooks/{webhook_id}", "delete">>("DELETE", `/webhooks/${id}`),
  webhookDeliveries: (id: number) =>
    request<Answer<"/api/v1/webhooks/{webhook_id}/deliveries", "get">>(
      "GET",
      `/webhooks/${id}/deliveries`,
    ).then((r) => r.deliveries),
  resolve: (params: { dag_id: string; run_id?: string; map_index?: string }) =>
    request<Answer<"/api/v1/ui/resolve", "get">>("GET", `/ui/resolve${query(params)}`),
};

export function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
