import { useMemo, useState } from "react";
import type { Checkpoint, Trial } from "../../api";
import { COMPARE_MIN, compareTrialsPath, useChosenTrials } from "../../compare";
import { SortHeader } from "../../components/SortHeader";
import { DASH, formatNumber, formatValue } from "../../format";
import {
  bestCheckpoints,
  flattenHparams,
  hparamNames,
  latestValidation,
  type SearcherInfo,
} from "../../hparams";
import { navigate } from "../../router";
import { useSorted } from "../../sorting";
import { stateClass } from "../../states";

type Props = { trials: Trial[]; checkpoints: Checkpoint[]; searcher: SearcherInfo };

type Row = {
  trial: Trial;
  best: number | null;
  latest: number | null;
  checkpoint: Checkpoint | undefined;
  hparams: Record<string, unknown>;
};

function sortValue(row: Row, key: string): unknown {
  if (key.startsWith("hp:")) return row.hparams[key.slice(3)] as unknown;
  switch (key) {
    case "best":
      return row.best;
    case "latest":
      return row.latest;
    case "checkpoint":
      return row.checkpoint?.steps_completed;
    default:
      return row.trial[key as keyof Trial];
  }
}

export function TrialsTab({ trials, checkpoints, searcher }: Props) {
  const [stateFilter, setStateFilter] = useState("");
  const { chosen: selected, toggle: toggleRow, clear } = useChosenTrials();
  const chosen = [...selected].sort((a, b) => a - b);
  const elsewhere = chosen.filter((id) => !trials.some((t) => t.id === id)).length;
  const names = useMemo(() => hparamNames(trials), [trials]);
  const rows = useMemo(() => {
    const best = bestCheckpoints(checkpoints, searcher.smallerIsBetter);
    return trials
      .filter((t) => !stateFilter || t.state === stateFilter)
      .map((t) => ({
        trial: t,
        best: t.best_validation?.metric ?? null,
        latest: latestValidation(t, searcher.metric),
        checkpoint: best.get(t.id),
        hparams: flattenHparams(t.hparams),
      }));
  }, [trials, checkpoints, searcher, stateFilter]);
  const { sorted, sort, toggle } = useSorted(rows, sortValue, { key: "id", descending: false });
  const states = [...new Set(trials.map((t) => t.state))].sort();
  const header = (label: string, column: string) => (
    <SortHeader label={label} column={column} sort={sort} onSort={toggle} />
  );
  const metric = searcher.metric ?? "metric";

  return (
    <div>
      <div className="filters">
        <select
          value={stateFilter}
          onChange={(e) => setStateFilter(e.target.value)}
          data-testid="trial-filter-state"
        >
          <option value="">All states</option>
          {states.map((state) => (
            <option key={state} value={state}>
              {state}
            </option>
          ))}
        </select>
        <span className="muted">
          {sorted.length} of {trials.length} trials
        </span>
        <button
          type="button"
          disabled={chosen.length < COMPARE_MIN}
          title={`Select at least ${COMPARE_MIN} trials`}
          onClick={() => navigate(compareTrialsPath(chosen))}
          data-testid="compare-trials"
        >
          Compare trials{chosen.length ? ` (${chosen.length})` : ""}
        </button>
        {elsewhere ? (
          <span className="muted" data-testid="chosen-elsewhere">
            {elsewhere} chosen on other experiments
          </span>
        ) : null}
        <button
          type="button"
          disabled={chosen.length === 0}
          onClick={clear}
          data-testid="clear-chosen-trials"
        >
          Clear choice
        </button>
      </div>
      <div className="scroll">
        <table className="grid" data-testid="trials-table">
          <thead>
            <tr>
              <th />
              {header("ID", "id")}
              {header("State", "state")}
              {header("Batches", "total_batches")}
              {header(`Best ${metric}`, "best")}
              {header(`Latest ${metric}`, "latest")}
              {header("Restarts", "restarts")}
              {header("Best checkpoint", "checkpoint")}
              {names.map((name) => (
                <SortHeader key={name} label={name} column={`hp:${name}`} sort={sort} onSort={toggle} />
              ))}
            </tr>
          </thead>
          <tbody>
            {sorted.map(({ trial, best, latest, checkpoint, hparams }) => (
              <tr key={trial.id} data-testid="trial-row" data-id={trial.id}>
                <td>
                  <input
                    type="checkbox"
                    checked={selected.has(trial.id)}
                    onChange={() => toggleRow(trial.id)}
                    aria-label={`Select trial ${trial.id}`}
                    data-testid="select-trial"
                  />
                </td>
                <td>
                  <a href={`#/trials/${trial.id}`}>{trial.id}</a>
                </td>
                <td>
                  <span className={stateClass(trial.state)}>{trial.state}</span>
                </td>
                <td>{trial.total_batches}</td>
                <td>{formatNumber(best)}</td>
                <td>{formatNumber(latest)}</td>
                <td>{trial.restarts}</td>
                <td title={checkpoint?.uuid}>
                  {checkpoint ? `${checkpoint.uuid.slice(0, 8)} @ ${checkpoint.steps_completed}` : DASH}
                </td>
                {names.map((name) => (
                  <td key={name}>{formatValue(hparams[name])}</td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </div>
  );
}
