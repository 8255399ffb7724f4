import { useMemo, useState } from "react";
import { api, errorText, type Experiment, type ExperimentAction } from "../api";
import { ConfirmDialog } from "../components/ConfirmDialog";
import { COMPARE_MAX, COMPARE_MIN, compareExperimentsPath } from "../compare";
import { ErrorBox } from "../components/ErrorBox";
import { SortHeader } from "../components/SortHeader";
import { navigate } from "../router";
import { DASH, durationSeconds, formatDate, formatDuration, formatNumber, formatPercent } from "../format";
import { useSorted } from "../sorting";
import { canDo, EXPERIMENT_STATES, stateClass } from "../states";
import { useData } from "../useData";

const PAGE_SIZE = 50;
const REFRESH_MS = 5000;
const BULK: { action: ExperimentAction; label: string }[] = [
  { action: "pause", label: "Pause" },
  { action: "activate", label: "Activate" },
  { action: "cancel", label: "Cancel" },
  { action: "kill", label: "Kill" },
  { action: "archive", label: "Archive" },
];

type Filters = { name: string; state: string; user: string; label: string };

function sortValue(e: Experiment, key: string): unknown {
  switch (key) {
    case "duration":
      return durationSeconds(e.start_time, e.end_time);
    case "labels":
      return e.labels.join(", ");
    case "metric":
      return e.best_validation;
    default:
      return e[key as keyof Experiment];
  }
}

function matches(e: Experiment, f: Filters): boolean {
  const contains = (text: string | null, part: string) =>
    (text ?? "").toLowerCase().includes(part.toLowerCase());
  return (
    (!f.name || contains(e.name, f.name) || String(e.id) === f.name.trim()) &&
    (!f.state || e.state === f.state) &&
    (!f.user || contains(e.owner, f.user)) &&
    (!f.label || e.labels.some((label) => contains(label, f.label)))
  );
}

export function ExperimentsPage() {
  const [showArchived, setShowArchived] = useState(false);
  const list = useData(() => api.experiments(showArchived), `experiments:${showArchived}`, REFRESH_MS);
  const [filters, setFilters] = useState<Filters>({ name: "", state: "", user: "", label: "" });
  const [page, setPage] = useState(0);
  const [selected, setSelected] = useState<Set<number>>(new Set());
  const [pending, setPending] = useState<ExperimentAction | null>(null);
  const [actionError, setActionError] = useState<string | null>(null);

  const filtered = useMemo(() => (list.data ?? []).filter((e) => matches(e, filters)), [list.data, filters]);
  const { sorted, sort, toggle } = useSorted(filtered, sortValue, { key: "id", descending: true });
  const pages = Math.max(1, Math.ceil(sorted.length / PAGE_SIZE));
  const shownPage = Math.min(page, pages - 1);
  const rows = sorted.slice(shownPage * PAGE_SIZE, (shownPage + 1) * PAGE_SIZE);
  const chosen = (list.data ?? []).filter((e) => selected.has(e.id));

  const setFilter = (key: keyof Filters, value: string) => {
    setFilters((current) => ({ ...current, [key]: value }));
    setPage(0);
  };
  const toggleRow = (id: number) =>
    setSelected((current) => {
      const next = new Set(current);
      if (next.has(id)) next.delete(id);
      else next.add(id);
      return next;
    });
  const allOnPage = rows.length > 0 && rows.every((e) => selected.has(e.id));
  const togglePage = () =>
    setSelected((current) => {
      const next = new Set(current);
      for (const e of rows) {
        if (allOnPage) next.delete(e.id);
        else next.add(e.id);
      }
      return next;
    });

  const runBulk = async (action: ExperimentAction) => {
    setPending(null);
    const targets = chosen.filter((e) => canDo(action, e.state));
    const failures: string[] = [];
    for (const e of targets) {
      try {
        await api.experimentAction(e.id, action);
      } catch (err) {
        failures.push(`experiment ${e.id}: ${errorText(err)}`);
      }
    }
    const skipped = chosen.length - targets.length;
    if (skipped > 0)
      failures.push(`${skipped} selected experiment(s) cannot ${action} in their state; left as they are`);
    setActionError(failures.length ? failures.join("\n") : null);
    setSelected(new Set());
    list.reload();
  };

  const header = (label: string, column: string) => (
    <SortHeader label={label} column={column} sort={sort} onSort={toggle} />
  );

  return (
    <section>
      <h1>Experiments</h1>
      <div className="filters">
        <input
          placeholder="Name or ID"
          value={filters.name}
          onChange={(e) => setFilter("name", e.target.value)}
          data-testid="filter-name"
        />
        <select
          value={filters.state}
          onChange={(e) => setFilter("state", e.target.value)}
          data-testid="filter-state"
        >
          <option value="">All states</option>
          {EXPERIMENT_STATES.map((state) => (
            <option key={state} value={state}>
              {state}
            </option>
          ))}
        </select>
        <input
          placeholder="User"
          value={filters.user}
          onChange={(e) => setFilter("user", e.target.value)}
          data-testid="filter-user"
        />
        <input
          placeholder="Label"
          value={filters.label}
          onChange={(e) => setFilter("label", e.target.value)}
          data-testid="filter-label"
        />
        <label className="check">
          <input
            type="checkbox"
            checked={showArchived}
            onChange={(e) => setShowArchived(e.target.checked)}
            data-testid="show-archived"
          />
          Show archived
        </label>
      </div>
      <div className="toolbar">
        <span className="muted">{chosen.length} selected</span>
        {BULK.map(({ action, label }) => (
          <button
            key={action}
            type="button"
            disabled={!chosen.some((e) => canDo(action, e.state))}
            onClick={() => setPending(action)}
            data-testid={`bulk-${action}`}
          >
            {label}
          </button>
        ))}
        <button
          type="button"
          disabled={chosen.length < COMPARE_MIN || chosen.length > COMPARE_MAX}
          title={`Compare ${COMPARE_MIN} to ${COMPARE_MAX} experiments`}
          onClick={() => navigate(compareExperimentsPath(chosen.map((e) => e.id).sort((a, b) => a - b)))}
          data-testid="bulk-compare"
        >
          Compare
        </button>
      </div>
      <ErrorBox error={list.error ?? actionError} />
      <div className="scroll">
        <table className="grid" data-testid="experiments-table">
          <thead>
            <tr>
              <th>
                <input
                  type="checkbox"
                  checked={allOnPage}
                  onChange={togglePage}
                  aria-label="Select all on this page"
                  data-testid="select-page"
                />
              </th>
              {header("ID", "id")}
              {header("Name", "name")}
              {header("State", "state")}
              {header("Progress", "progress")}
              {header("Searcher", "searcher")}
              {header("Metric (best)", "metric")}
              {header("Trials", "num_trials")}
              {header("User", "owner")}
              {header("Labels", "labels")}
              {header("Resource pool", "resource_pool")}
              {header("Started", "start_time")}
              {header("Duration", "duration")}
            </tr>
          </thead>
          <tbody>
            {rows.map((e) => (
              <tr key={e.id} data-testid="experiment-row" data-id={e.id}>
                <td>
                  <input
                    type="checkbox"
                    checked={selected.has(e.id)}
                    onChange={() => toggleRow(e.id)}
                    aria-label={`Select experiment ${e.id}`}
                    data-testid="select-row"
                  />
                </td>
                <td>
                  <a href={`#/experiments/${e.id}`}>{e.id}</a>
                </td>
                <td>
                  <a href={`#/experiments/${e.id}`} data-testid="experiment-link">
                    {e.name}
                  </a>
                  {e.archived ? <span className="tag">archived</span> : null}
                </td>
                <td>
                  <span className={stateClass(e.state)}>{e.state}</span>
                </td>
                <td>{formatPercent(e.progress)}</td>
                <td>{e.searcher}</td>
                <td>
                  {e.searcher_metric ?? DASH}
                  {e.best_validation !== undefined && e.best_validation !== null
                    ? ` (${formatNumber(e.best_validation)})`
                    : ""}
                </td>
                <td>{e.num_trials ?? DASH}</td>
                <td>{e.owner ?? DASH}</td>
                <td>
                  {e.labels.map((label) => (
                    <span key={label} className="tag">
                      {label}
                    </span>
                  ))}
                </td>
                <td>{e.resource_pool}</td>
                <td>{formatDate(e.start_time)}</td>
                <td>{formatDuration(durationSeconds(e.start_time, e.end_time))}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {list.data && sorted.length === 0 ? <p className="muted">No experiments match.</p> : null}
      {!list.data && list.loading ? <p className="muted">Loading…</p> : null}
      <div className="pager">
        <button
          type="button"
          disabled={shownPage === 0}
          onClick={() => setPage(shownPage - 1)}
          data-testid="page-prev"
        >
          Previous
        </button>
        <span data-testid="page-info">
          Page {shownPage + 1} of {pages} ({sorted.length} experiments)
        </span>
        <button
          type="button"
          disabled={shownPage >= pages - 1}
          onClick={() => setPage(shownPage + 1)}
          data-testid="page-next"
        >
          Next
        </button>
      </div>
      {pending ? (
        <ConfirmDialog
          message={`${pending[0].toUpperCase()}${pending.slice(1)} ${chosen.filter((e) => canDo(pending, e.state)).length} experiment(s): ${chosen
            .filter((e) => canDo(pending, e.state))
            .map((e) => e.id)
            .join(", ")}?`}
          onConfirm={() => void runBulk(pending)}
          onCancel={() => setPending(null)}
        />
      ) : null}
    </section>
  );
}
