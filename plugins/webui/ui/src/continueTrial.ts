import { api, type Experiment, type Json, type Trial } from "./api";

const MASK = "********";
// The searcher fields that say how long the new trial trains, in either config era.
const LENGTH_FIELDS = ["max_length", "max_time", "time_metric"];

function constant(value: unknown): unknown {
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    return Object.fromEntries(Object.entries(value as Json).map(([key, inner]) => [key, constant(inner)]));
  }
  return { type: "const", val: value };
}

/**
 * The config of a one-trial experiment that carries on from `trial`: the same settings, a `single`
 * searcher warm-started from the trial's latest checkpoint, and the trial's hyperparameters fixed.
 */
export function continuedConfig(config: Json, trial: Trial): Json {
  if (JSON.stringify(config).includes(MASK)) {
    throw new Error(
      "this experiment's config shows masked secrets (only its owner and admins see them), so it cannot be " +
        "copied into a new experiment; ask its owner to continue the trial",
    );
  }
  const searcher = (config.searcher ?? {}) as Json;
  const next: Json = {
    name: "single",
    metric: searcher.metric,
    smaller_is_better: searcher.smaller_is_better ?? true,
    source_trial_id: trial.id,
  };
  for (const field of LENGTH_FIELDS) {
    if (searcher[field] !== null && searcher[field] !== undefined) next[field] = searcher[field];
  }
  return {
    ...config,
    name: `${String(config.name ?? "experiment")} (trial ${trial.id} continued)`,
    searcher: next,
    hyperparameters: constant(trial.hparams),
  };
}

async function base64(blob: Blob): Promise<string> {
  const bytes = new Uint8Array(await blob.arrayBuffer());
  let binary = "";
  const chunk = 0x8000;
  for (let i = 0; i < bytes.length; i += chunk)
    binary += String.fromCharCode(...bytes.subarray(i, i + chunk));
  return btoa(binary);
}

/** Creates the experiment (the same request as `det experiment create`, with the parent's code). */
export async function continueTrial(trial: Trial): Promise<Experiment> {
  const config = continuedConfig(await api.experimentConfig(trial.experiment_id), trial);
  const context = await api.experimentContext(trial.experiment_id);
  const created = await api.createExperiment({
    // JSON is YAML, so the master reads this config as it reads a file.
    config: JSON.stringify(config),
    context: context.size > 0 ? await base64(context) : null,
    parent_id: trial.experiment_id,
  });
  return created.experiment;
}
