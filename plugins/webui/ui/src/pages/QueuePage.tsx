import { useState } from "react";
import { api, errorText, type Job, type JobChange } from "../api";
import { ConfirmDialog } from "../components/ConfirmDialog";
import { ErrorBox } from "../components/ErrorBox";
import { DASH, formatDate } from "../format";
import { canDo, stateClass } from "../states";
import { isTaskJob, JOB_TYPE_NAMES } from "../tasks";
import { useData } from "../useData";

const REFRESH_MS = 5000;

/** The job queue, per resource pool in scheduling order, as `det job list` shows it. */
export function QueuePage() {
  const jobs = useData(() => api.jobs(), "jobs", REFRESH_MS);
  const [managing, setManaging] = useState<number | null>(null);
  const [error, setError] = useState<string | null>(null);

  const pools = new Map<string, Job[]>();
  for (const job of jobs.data ?? []) {
    const list = pools.get(job.resource_pool) ?? [];
    list.push(job);
    pools.set(job.resource_pool, list);
  }

  const done = (failure: string | null) => {
    setError(failure);
    if (!failure) setManaging(null);
    jobs.reload();
  };

  return (
    <section>
      <h1>Job queue</h1>
      <ErrorBox error={error ?? jobs.error} />
      {jobs.data && jobs.data.length === 0 ? <p className="muted">No jobs are waiting or running.</p> : null}
      {[...pools.entries()].map(([pool, list]) => (
        <div key={pool} className="pool">
          <h2>Resource pool {pool}</h2>
          <div className="scroll">
            <table className="grid" data-testid="queue-table" data-pool={pool}>
              <thead>
                <tr>
                  <th>Jobs ahead</th>
                  <th>ID</th>
                  <th>Type</th>
                  <th>Name</th>
                  <th>Priority</th>
                  <th>Weight</th>
                  <th>Slots (acquired / needed)</th>
                  <th>State</th>
                  <th>User</th>
                  <th>Submitted</th>
                  <th>Hosts</th>
                  <th />
                </tr>
              </thead>
              <tbody>
                {list.map((job) => (
                  <JobRows
                    key={job.id}
                    job={job}
                    first={list[0]}
                    open={managing === job.id}
                    onToggle={() => setManaging(managing === job.id ? null : job.id)}
                    onDone={done}
                  />
                ))}
              </tbody>
            </table>
          </div>
        </div>
      ))}
    </section>
  );
}

type RowProps = {
  job: Job;
  first: Job;
  open: boolean;
  onToggle: () => void;
  onDone: (failure: string | null) => void;
};

function JobRows({ job, first, open, onToggle, onDone }: RowProps) {
  return (
    <>
      <tr data-testid="job-row" data-id={job.id}>
        <td>{job.jobs_ahead}</td>
        <td>
          <a href={isTaskJob(job) ? `#/tasks/${job.id}` : `#/experiments/${job.id}`} data-testid="job-link">
            {job.id}
          </a>
        </td>
        <td data-testid="job-type">{JOB_TYPE_NAMES[job.type]}</td>
        <td>{job.name ?? DASH}</td>
        <td data-testid="job-priority-value">{job.priority}</td>
        <td>{job.weight}</td>
        <td>
          {job.acquired_slots} / {job.needed_slots}
          {job.fits_pool ? "" : " (does not fit the pool)"}
          {job.fits_pool && job.fits_hosts === false
            ? ` (waits for hosts that can take ${job.slots_per_trial} slots)`
            : ""}
        </td>
        <td>
          <span className={stateClass(job.state)}>{job.state}</span>{" "}
          <span className="muted">({job.experiment_state})</span>
        </td>
        <td>{job.user ?? DASH}</td>
        <td>{formatDate(job.submitted)}</td>
        <td data-testid="job-hosts">{job.hosts?.length ? job.hosts.join(", ") : DASH}</td>
        <td>
          <button type="button" onClick={onToggle} data-testid="manage-job">
            {open ? "Close" : "Manage"}
          </button>
        </td>
      </tr>
      {open ? (
        <tr className="manage">
          <td colSpan={12}>
            <ManageJob job={job} first={first} onDone={onDone} />
          </td>
        </tr>
      ) : null}
    </>
  );
}

function ManageJob({
  job,
  first,
  onDone,
}: {
  job: Job;
  first: Job;
  onDone: (failure: string | null) => void;
}) {
  const [priority, setPriority] = useState(String(job.priority));
  const [pool, setPool] = useState(job.resource_pool);
  const [pending, setPending] = useState<"cancel" | "kill" | null>(null);
  const [busy, setBusy] = useState(false);
  // A task stops only by a kill (`det task kill`), through its own route.
  const task = isTaskJob(job);

  const run = async (work: () => Promise<unknown>) => {
    setBusy(true);
    try {
      await work();
      onDone(null);
    } catch (err) {
      onDone(`job ${job.id}: ${errorText(err)}`);
    } finally {
      setBusy(false);
    }
  };
  const update = (change: JobChange) => run(() => api.updateJob(job.id, change));
  const savePriority = () => {
    const value = Number(priority);
    if (!Number.isInteger(value) || value < 1 || value > 99) {
      onDone(`job ${job.id}: priority must be a whole number from 1 to 99, got '${priority}'`);
      return;
    }
    void update({ priority: value });
  };

  return (
    <div className="manage-form" data-testid="manage-form">
      <label>
        Priority (1 runs first, 99 last){" "}
        <input
          type="number"
          min={1}
          max={99}
          value={priority}
          onChange={(e) => setPriority(e.target.value)}
          data-testid="job-priority"
        />
      </label>
      <button type="button" disabled={busy} onClick={savePriority} data-testid="job-save">
        Save
      </button>
      <button
        type="button"
        disabled={busy || first.id === job.id}
        onClick={() => void update({ ahead_of: first.id })}
        data-testid="job-top"
      >
        Move to top
      </button>
      <label>
        Resource pool <input value={pool} onChange={(e) => setPool(e.target.value)} data-testid="job-pool" />
      </label>
      <button
        type="button"
        disabled={busy || !pool.trim() || pool === job.resource_pool}
        onClick={() => void update({ resource_pool: pool.trim() })}
        data-testid="job-pool-save"
      >
        Move to pool
      </button>
      {task ? null : (
        <button
          type="button"
          disabled={busy || !canDo("cancel", job.experiment_state)}
          onClick={() => setPending("cancel")}
          data-testid="job-cancel"
        >
          Cancel job
        </button>
      )}
      <button
        type="button"
        disabled={busy || !canDo("kill", job.experiment_state)}
        onClick={() => setPending("kill")}
        data-testid="job-kill"
      >
        Kill job
      </button>
      {pending ? (
        <ConfirmDialog
          message={`${pending === "kill" ? "Kill" : "Cancel"} job ${job.id}${job.name ? ` (${job.name})` : ""}?`}
          onConfirm={() => {
            setPending(null);
            void run(() =>
              task && pending === "kill" ? api.killTask(job.id) : api.experimentAction(job.id, pending),
            );
          }}
          onCancel={() => setPending(null)}
        />
      ) : null}
    </div>
  );
}
