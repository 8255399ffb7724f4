import { useEffect, useMemo, useRef, useState } from "react";
import { api, errorText, LOG_LEVELS, type LogLine, type LogQuery } from "../../api";
import { ErrorBox } from "../../components/ErrorBox";
import { frameForbids } from "../../frame";
import { isTrialTerminal } from "../../states";

const FIRST_LINES = 10_000;
const TAIL_MS = 2000;
const PAGE = 100_000;
const TYPING_MS = 300;

type Filters = { rank: string; level: string; search: string };

function text(line: LogLine): string {
  const rank = line.rank === null ? "" : `[rank=${line.rank}] `;
  const level = line.level ? `${line.level} ` : "";
  return `${line.timestamp ?? ""} ${rank}${level}${line.message}`.trimStart();
}

function useDebounced<T>(value: T, ms: number): T {
  const [settled, setSettled] = useState(value);
  useEffect(() => {
    const timer = window.setTimeout(() => setSettled(value), ms);
    return () => window.clearTimeout(timer);
  }, [value, ms]);
  return settled;
}

/**
 * The trial's logs, filtered by the master (so a filter covers the whole log, not only the lines on
 * screen): the last lines first, then new ones as they arrive while the trial runs.
 */
export function LogsPanel({ trialId }: { trialId: number }) {
  const [lines, setLines] = useState<LogLine[]>([]);
  const [ranks, setRanks] = useState<number[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [running, setRunning] = useState(true);
  const [rank, setRank] = useState("");
  const [level, setLevel] = useState("");
  const [typed, setTyped] = useState("");
  const search = useDebounced(typed, TYPING_MS);
  const box = useRef<HTMLDivElement>(null);
  const stickToBottom = useRef(true);
  const blocked = useMemo(() => frameForbids("allow-downloads"), []);
  const filters: Filters = useMemo(() => ({ rank, level, search }), [rank, level, search]);

  useEffect(() => {
    let cancelled = false;
    let last: number | undefined;
    let timer: number | undefined;
    const poll = async (first: boolean) => {
      try {
        const page = await api.trialLogs(trialId, {
          ...filters,
          ...(first ? { tail: FIRST_LINES } : { after: last }),
        });
        if (cancelled) return;
        if (first || page.logs.length > 0) {
          if (page.logs.length > 0) last = page.logs[page.logs.length - 1].id;
          setLines((current) => (first ? page.logs : [...current, ...page.logs]));
          // Ranks seen so far, kept when a rank filter hides the others.
          setRanks((current) => {
            const seen = new Set(current);
            for (const line of page.logs) if (line.rank !== null) seen.add(line.rank);
            return seen.size === current.length ? current : [...seen].sort((a, b) => a - b);
          });
        }
        setError(null);
        const live = !isTrialTerminal(page.trial_state);
        setRunning(live);
        // One more read after the trial ends picks up its last lines.
        if (live || first) timer = window.setTimeout(() => void poll(false), TAIL_MS);
      } catch (err) {
        if (cancelled) return;
        setError(errorText(err));
        timer = window.setTimeout(() => void poll(first), TAIL_MS * 2);
      }
    };
    void poll(true);
    return () => {
      cancelled = true;
      window.clearTimeout(timer);
    };
  }, [trialId, filters]);

  useEffect(() => {
    const element = box.current;
    if (element && stickToBottom.current) element.scrollTop = element.scrollHeight;
  }, [lines]);

  const download = async () => {
    try {
      const all: LogLine[] = [];
      for (;;) {
        const after = all.length ? all[all.length - 1].id : undefined;
        const page = await api.trialLogs(trialId, { ...filters, after, limit: PAGE } satisfies LogQuery);
        all.push(...page.logs);
        if (page.logs.length < PAGE) break;
      }
      const url = URL.createObjectURL(new Blob([all.map(text).join("\n") + "\n"], { type: "text/plain" }));
      const link = document.createElement("a");
      link.href = url;
      link.download = `trial-${trialId}-logs.txt`;
      link.click();
      URL.revokeObjectURL(url);
    } catch (err) {
      setError(errorText(err));
    }
  };

  return (
    <div>
      <div className="filters">
        <label>
          Rank{" "}
          <select value={rank} onChange={(e) => setRank(e.target.value)} data-testid="log-rank">
            <option value="">all</option>
            {ranks.map((r) => (
              <option key={r} value={String(r)}>
                {r}
              </option>
            ))}
          </select>
        </label>
        <label>
          Level{" "}
          <select value={level} onChange={(e) => setLevel(e.target.value)} data-testid="log-level">
            <option value="">all</option>
            {LOG_LEVELS.map((l) => (
              <option key={l} value={l}>
                {l} and above
              </option>
            ))}
          </select>
        </label>
        <input
          placeholder="Search"
          value={typed}
          onChange={(e) => setTyped(e.target.value)}
          data-testid="log-search"
        />
        <button
          type="button"
          disabled={blocked}
          onClick={() => void download()}
          data-testid="log-download"
          title={blocked ? "Airflow's page frame does not allow downloads" : undefined}
        >
          Download
        </button>
        {blocked ? (
          <span className="muted">
            To download, open <code>{window.location.href}</code> in a tab of its own.
          </span>
        ) : null}
        <span className="muted">
          {lines.length} lines{running ? " · following" : ""}
        </span>
      </div>
      <ErrorBox error={error} />
      <div
        ref={box}
        className="logs"
        data-testid="logs"
        onScroll={(e) => {
          const el = e.currentTarget;
          stickToBottom.current = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
        }}
      >
        {lines.map((line) => (
          <div
            key={line.id}
            className={`log-line level-${(line.level ?? "").toLowerCase()}`}
            data-testid="log-line"
            data-rank={line.rank ?? ""}
          >
            {text(line)}
          </div>
        ))}
      </div>
    </div>
  );
}
