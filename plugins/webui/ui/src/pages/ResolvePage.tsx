import { useEffect, useState } from "react";
import { api, errorText } from "../api";
import { ErrorBox } from "../components/ErrorBox";
import { navigate } from "../router";

type Props = { dagId: string; runId?: string; mapIndex?: string };

/** Airflow's DAG and task instance tabs link here; the page finds the experiment or trial and goes on. */
export function ResolvePage({ dagId, runId, mapIndex }: Props) {
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    let cancelled = false;
    api
      .resolve({ dag_id: dagId, run_id: runId, map_index: mapIndex })
      .then(({ experiment_id, trial_id }) => {
        if (cancelled) return;
        if (mapIndex !== undefined && trial_id !== null) navigate(`/trials/${trial_id}`, true);
        else navigate(`/experiments/${experiment_id}`, true);
      })
      .catch((err: unknown) => {
        if (!cancelled) setError(errorText(err));
      });
    return () => {
      cancelled = true;
    };
  }, [dagId, runId, mapIndex]);
  return error ? <ErrorBox error={error} /> : <p className="muted">Finding the experiment of DAG {dagId}…</p>;
}
