import { useState } from "react";
import { api, errorText, type Task } from "../../api";
import { ErrorBox } from "../../components/ErrorBox";
import { OpenTask } from "../../components/TaskActions";
import { handTask, openWaitingTab } from "../../newTab";
import { TERMINATED, TERMINATING } from "../../tasks";
import { useData } from "../../useData";

const POLL_MS = 1000;

/** Whether `board`, still running, shows exactly these trials of this one experiment. */
function showsExactly(board: Task, experimentId: number, trialIds: number[]): boolean {
  const same = (a: number[], b: number[]) => {
    const sorted = [...b].sort((x, y) => x - y);
    return a.length === b.length && [...a].sort((x, y) => x - y).every((v, i) => v === sorted[i]);
  };
  return (
    board.state !== TERMINATING &&
    board.state !== TERMINATED &&
    same(board.experiment_ids, [experimentId]) &&
    same(board.trial_ids, trialIds)
  );
}

type Props = { experimentId: number; trialIds: number[] };

/**
 * Opens the user's TensorBoard of this experiment in a new tab, starting one when the user runs
 * none of exactly its trials. The tab opens on the click (later, a browser would block it) and
 * waits there until the TensorBoard answers.
 */
export function OpenTensorBoard({ experimentId, trialIds }: Props) {
  const [boardId, setBoardId] = useState<number | null>(null);
  const [starting, setStarting] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [tabRefused, setTabRefused] = useState(false);
  const [watching, setWatching] = useState(false);
  const board = useData(
    () => (boardId === null ? Promise.resolve(null) : api.task(boardId)),
    `tensorboard:${boardId}`,
    watching ? POLL_MS : null,
  );
  const shown = board.data ?? null;
  if (watching && shown && (shown.ready || shown.state === TERMINATED)) setWatching(false);

  const open = async () => {
    const tab = openWaitingTab();
    setStarting(true);
    setError(null);
    setTabRefused(tab === null);
    try {
      const mine = await api.tasks({ type: "tensorboard" });
      const found = mine.find((t) => showsExactly(t, experimentId, trialIds));
      const started =
        found ?? (await api.createTask({ type: "tensorboard", experiment_ids: [experimentId] }));
      setBoardId(started.id);
      setWatching(true);
      if (tab) handTask(tab, started.id);
    } catch (err) {
      tab?.close();
      setError(`TensorBoard: ${errorText(err)}`);
    } finally {
      setStarting(false);
    }
  };

  const failure =
    error ??
    (shown?.state === TERMINATED
      ? `TensorBoard ${shown.id} ended (${shown.end_state ?? TERMINATED}) before it served its page.`
      : null) ??
    board.error;

  return (
    <>
      <button
        type="button"
        disabled={starting || trialIds.length === 0}
        title={trialIds.length === 0 ? "The experiment has no trials to show yet" : undefined}
        onClick={() => void open()}
        data-testid="open-tensorboard"
      >
        {starting ? "Starting TensorBoard…" : "Open TensorBoard"}
      </button>
      {shown && !error ? (
        <span className="muted" data-testid="tensorboard-status">
          {shown.ready
            ? `TensorBoard ${shown.id} is ready${tabRefused ? "" : " in its tab"}.`
            : shown.state === TERMINATED
              ? `TensorBoard ${shown.id} has ended.`
              : `TensorBoard ${shown.id}: ${shown.state}…`}{" "}
          <OpenTask task={shown} onDone={setError} /> <a href={`#/tasks/${shown.id}`}>Logs</a>
        </span>
      ) : null}
      {tabRefused && shown && !shown.ready && !failure ? (
        <span className="muted">The browser opened no tab: press Open once it is ready.</span>
      ) : null}
      <ErrorBox error={failure} />
    </>
  );
}
