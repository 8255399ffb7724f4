import type { Checkpoint, Json, Trial } from "./api";

/** Nested hyperparameters as dotted names (`optimizer.lr`), the way Determined shows them. */
export function flattenHparams(hparams: Json, prefix = ""): Record<string, unknown> {
  const flat: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(hparams ?? {})) {
    const name = prefix ? `${prefix}.${key}` : key;
    if (value !== null && typeof value === "object" && !Array.isArray(value)) {
      Object.assign(flat, flattenHparams(value as Json, name));
    } else {
      flat[name] = value;
    }
  }
  return flat;
}

/** A hyperparameter's type as the experiment's config declares it; "unknown" where it does not. */
export type HparamType = "const" | "int" | "double" | "log" | "categorical" | "unknown";

/** The declared type of every hyperparameter of a config, by dotted name (plain values are consts). */
export function hparamTypes(config: Json): Map<string, HparamType> {
  const types = new Map<string, HparamType>();
  const walk = (section: Json, prefix: string) => {
    for (const [key, spec] of Object.entries(section ?? {})) {
      const name = prefix ? `${prefix}.${key}` : key;
      if (spec !== null && typeof spec === "object" && !Array.isArray(spec)) {
        const type = (spec as { type?: unknown }).type;
        if (typeof type === "string") {
          const known = ["const", "int", "double", "log", "categorical"].includes(type);
          types.set(name, known ? (type as HparamType) : "unknown");
        } else walk(spec as Json, name);
      } else types.set(name, "const");
    }
  };
  walk((config.hyperparameters ?? {}) as Json, "");
  return types;
}

export function hparamNames(trials: Trial[]): string[] {
  const names = new Set<string>();
  for (const trial of trials) for (const name of Object.keys(flattenHparams(trial.hparams))) names.add(name);
  return [...names].sort();
}

export type SearcherInfo = { metric: string | null; smallerIsBetter: boolean };

export function searcherInfo(config: Json): SearcherInfo {
  const searcher = (config.searcher ?? {}) as { metric?: unknown; smaller_is_better?: unknown };
  return {
    metric: typeof searcher.metric === "string" ? searcher.metric : null,
    smallerIsBetter: searcher.smaller_is_better !== false,
  };
}

export function latestValidation(trial: Trial, metric: string | null): number | null {
  const value = metric ? trial.summary_metrics?.validation?.[metric] : undefined;
  return typeof value === "number" ? value : null;
}

/** Each trial's best completed checkpoint by its validation metric, else its latest one. */
export function bestCheckpoints(
  checkpoints: Checkpoint[],
  smallerIsBetter: boolean,
): Map<number, Checkpoint> {
  const best = new Map<number, Checkpoint>();
  const better = (a: Checkpoint, b: Checkpoint) => {
    if (a.validation_metric === null)
      return b.validation_metric === null && a.steps_completed > b.steps_completed;
    if (b.validation_metric === null) return true;
    return smallerIsBetter
      ? a.validation_metric < b.validation_metric
      : a.validation_metric > b.validation_metric;
  };
  for (const checkpoint of checkpoints) {
    if (checkpoint.state !== "COMPLETED") continue;
    const current = best.get(checkpoint.trial_id);
    if (!current || better(checkpoint, current)) best.set(checkpoint.trial_id, checkpoint);
  }
  return best;
}
