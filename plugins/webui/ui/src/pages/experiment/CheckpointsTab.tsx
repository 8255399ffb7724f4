import type { Checkpoint } from "../../api";
import { RegisterCheckpoint } from "../../components/RegisterCheckpoint";
import { SortHeader } from "../../components/SortHeader";
import { formatBytes, formatDate, formatNumber } from "../../format";
import { useSorted } from "../../sorting";

export function CheckpointsTab({ checkpoints }: { checkpoints: Checkpoint[] }) {
  const { sorted, sort, toggle } = useSorted(checkpoints, (c, key) => c[key as keyof Checkpoint], {
    key: "report_time",
    descending: true,
  });
  const header = (label: string, column: string) => (
    <SortHeader label={label} column={column} sort={sort} onSort={toggle} />
  );
  if (checkpoints.length === 0) return <p className="muted">No checkpoints yet.</p>;
  return (
    <div className="scroll">
      <table className="grid" data-testid="checkpoints-table">
        <thead>
          <tr>
            {header("UUID", "uuid")}
            {header("Trial", "trial_id")}
            {header("Batches", "steps_completed")}
            {header("Validation metric", "validation_metric")}
            {header("Size", "size")}
            {header("State", "state")}
            {header("Reported", "report_time")}
            <th />
          </tr>
        </thead>
        <tbody>
          {sorted.map((c) => (
            <tr key={c.uuid} data-testid="checkpoint-row" data-id={c.uuid}>
              <td className="mono">{c.uuid}</td>
              <td>
                <a href={`#/trials/${c.trial_id}`}>{c.trial_id}</a>
              </td>
              <td>{c.steps_completed}</td>
              <td>{formatNumber(c.validation_metric)}</td>
              <td>{formatBytes(c.size)}</td>
              <td>{c.state}</td>
              <td>{formatDate(c.report_time)}</td>
              <td>
                <RegisterCheckpoint checkpoint={c} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
