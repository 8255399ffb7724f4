import { type FormEvent, useRef, useState } from "react";
import { api, errorText, type Webhook, type WebhookTrigger } from "../api";
import { ConfirmDialog } from "../components/ConfirmDialog";
import { ErrorBox } from "../components/ErrorBox";
import { formatDate } from "../format";
import { EXPERIMENT_STATES } from "../states";
import { useData } from "../useData";

const REFRESH_MS = 10000;
const DELIVERIES_REFRESH_MS = 3000;

type TriggerType = WebhookTrigger["triggerType"];
type CompareOp = ">" | ">=" | "<" | "<=";

/** One row of the trigger editor, as the strings its inputs hold. */
type TriggerRow = {
  key: number;
  triggerType: TriggerType;
  state: string;
  metricGroup: "validation" | "training";
  metricName: string;
  compareOp: CompareOp;
  value: string;
  regex: string;
};

const TRIGGER_TYPES: { value: TriggerType; label: string }[] = [
  { value: "EXPERIMENT_STATE_CHANGE", label: "Experiment state" },
  { value: "METRIC_THRESHOLD_EXCEEDED", label: "Metric threshold" },
  { value: "TASK_LOG", label: "Log line matches" },
  { value: "CUSTOM", label: "Custom alert" },
];
const COMPARE_OPS: CompareOp[] = [">", ">=", "<", "<="];

/** Determined's enum name as the pages say it: `WEBHOOK_TYPE_SLACK` → `SLACK`. */
function short(name: string, prefix: string): string {
  return name.startsWith(prefix) ? name.slice(prefix.length) : name;
}

/** The events a webhook fires on, as `det webhook list` would say them. */
export function triggerWords(trigger: { triggerType: string; condition?: Record<string, unknown> }): string {
  const c = trigger.condition ?? {};
  switch (short(trigger.triggerType, "TRIGGER_TYPE_")) {
    case "EXPERIMENT_STATE_CHANGE":
      return `experiment reaches ${String(c.state)}`;
    case "METRIC_THRESHOLD_EXCEEDED":
      return `${String(c.metricGroup ?? "validation")} ${String(c.metricName)} ${String(c.compareOp)} ${String(c.value)}`;
    case "TASK_LOG":
      return `log line matches /${String(c.regex)}/`;
    case "CUSTOM":
      return "custom alert";
    default:
      return trigger.triggerType;
  }
}

/** Webhooks (`det webhook`): those the caller may see, a form to create one, and each one's deliveries. */
export function WebhooksPage() {
  const list = useData(() => api.webhooks(), "webhooks", REFRESH_MS);
  const me = useData(() => api.me(), "me");
  const [created, setCreated] = useState<Webhook | null>(null);
  const [shown, setShown] = useState<number | null>(null);
  const [deleting, setDeleting] = useState<Webhook | null>(null);
  const [error, setError] = useState<string | null>(null);

  const remove = async (webhook: Webhook) => {
    setDeleting(null);
    setError(null);
    try {
      await api.deleteWebhook(webhook.id);
      if (shown === webhook.id) setShown(null);
      if (created?.id === webhook.id) setCreated(null);
      list.reload();
    } catch (err) {
      setError(errorText(err));
    }
  };

  const webhooks = list.data ?? [];
  const shownWebhook = webhooks.find((w) => w.id === shown);
  return (
    <section>
      <h1>Webhooks</h1>
      <NewWebhookForm
        admin={me.data?.admin === true}
        onCreated={(webhook) => {
          setCreated(webhook);
          list.reload();
        }}
      />
      {created ? <SigningKey webhook={created} onDismiss={() => setCreated(null)} /> : null}
      <ErrorBox error={list.error ?? error} />
      <div className="scroll">
        <table className="grid" data-testid="webhooks-table">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">URL</th>
              <th scope="col">Type</th>
              <th scope="col">Mode</th>
              <th scope="col">Triggers</th>
              <th scope="col">Owner</th>
              <th scope="col">Created</th>
              <th scope="col">
                <span className="muted">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {webhooks.map((w) => (
              <tr key={w.id} data-testid="webhook-row" data-id={w.name}>
                <td data-testid="webhook-name">{w.name}</td>
                <td className="mono">{w.url}</td>
                <td>{short(w.webhookType, "WEBHOOK_TYPE_")}</td>
                <td>{short(w.mode, "WEBHOOK_MODE_")}</td>
                <td data-testid="webhook-triggers">
                  {w.triggers.map((t, i) => (
                    <div key={i}>{triggerWords(t)}</div>
                  ))}
                </td>
                <td>{w.owner}</td>
                <td>{formatDate(w.createdAt)}</td>
                <td className="row-actions">
                  <button
                    type="button"
                    aria-expanded={shown === w.id}
                    onClick={() => setShown(shown === w.id ? null : w.id)}
                  >
                    Deliveries
                  </button>
                  <button type="button" onClick={() => setDeleting(w)}>
                    Delete
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {list.data && webhooks.length === 0 ? <p className="muted">No webhooks yet: create one here.</p> : null}
      {!list.data && list.loading ? <p className="muted">Loading…</p> : null}
      {shownWebhook ? <Deliveries key={shownWebhook.id} webhook={shownWebhook} /> : null}
      {deleting ? (
        <ConfirmDialog
          message={`Delete webhook ${deleting.name}? Its undelivered events are not sent.`}
          onConfirm={() => void remove(deleting)}
          onCancel={() => setDeleting(null)}
        />
      ) : null}
    </section>
  );
}

/** The signing key, which no later answer shows again. */
function SigningKey({ webhook, onDismiss }: { webhook: Webhook; onDismiss: () => void }) {
  const field = useRef<HTMLInputElement>(null);
  const [copied, setCopied] = useState<string | null>(null);
  const key = webhook.signingKey ?? "";

  const copy = async () => {
    try {
      await navigator.clipboard.writeText(key);
      setCopied("Copied.");
    } catch {
      field.current?.select();
      setCopied("Selected: press Ctrl+C to copy.");
    }
  };

  return (
    <div className="manage-form" role="region" aria-label="Signing key" data-testid="webhook-signing-key">
      <strong>Signing key of {webhook.name}</strong>
      <p>
        Shown only now: no later page or answer shows it again. Keep it where the receiver checks each
        POST&apos;s X-Determined-AI-Signature with it.
      </p>
      <span className="check">
        <label htmlFor="webhook-signing-key-value">Key</label>
        <input
          id="webhook-signing-key-value"
          ref={field}
          className="mono"
          value={key}
          readOnly
          size={70}
          onFocus={(e) => e.target.select()}
          data-testid="webhook-signing-key-value"
        />
      </span>
      <button type="button" onClick={() => void copy()}>
        Copy
      </button>
      <span role="status" className="muted">
        {copied}
      </span>
      <button type="button" onClick={onDismiss}>
        Done
      </button>
    </div>
  );
}

let nextRowKey = 1;

function newRow(): TriggerRow {
  return {
    key: nextRowKey++,
    triggerType: "EXPERIMENT_STATE_CHANGE",
    state: "COMPLETED",
    metricGroup: "validation",
    metricName: "",
    compareOp: ">",
    value: "",
    regex: "",
  };
}

/** The trigger as the master takes it; the master checks it and answers in its own words. */
function toTrigger(row: TriggerRow): WebhookTrigger {
  switch (row.triggerType) {
    case "EXPERIMENT_STATE_CHANGE":
      return { triggerType: row.triggerType, condition: { state: row.state } };
    case "METRIC_THRESHOLD_EXCEEDED":
      return {
        triggerType: row.triggerType,
        condition: {
          metricName: row.metricName.trim(),
          metricGroup: row.metricGroup,
          compareOp: row.compareOp,
          value: row.value.trim() === "" ? row.value : Number(row.value),
        },
      };
    case "TASK_LOG":
      return { triggerType: row.triggerType, condition: { regex: row.regex } };
    case "CUSTOM":
      return { triggerType: row.triggerType, condition: {} };
  }
}

/** Creates a webhook (`det webhook create`); WORKSPACE mode is offered to admins only. */
function NewWebhookForm({ admin, onCreated }: { admin: boolean; onCreated: (webhook: Webhook) => void }) {
  const [name, setName] = useState("");
  const [url, setUrl] = useState("");
  const [webhookType, setWebhookType] = useState<"DEFAULT" | "SLACK">("DEFAULT");
  const [mode, setMode] = useState<"SPECIFIC" | "WORKSPACE">("SPECIFIC");
  const [rows, setRows] = useState<TriggerRow[]>(() => [newRow()]);
  const [error, setError] = useState<string | null>(null);
  const [saving, setSaving] = useState(false);

  const change = (key: number, patch: Partial<TriggerRow>) =>
    setRows((current) => current.map((row) => (row.key === key ? { ...row, ...patch } : row)));

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setSaving(true);
    setError(null);
    try {
      const created = await api.createWebhook({
        name: name.trim(),
        url: url.trim(),
        webhookType,
        mode: admin ? mode : "SPECIFIC",
        triggers: rows.map(toTrigger),
      });
      setName("");
      setUrl("");
      setRows([newRow()]);
      onCreated(created);
    } catch (err) {
      setError(errorText(err));
    } finally {
      setSaving(false);
    }
  };

  return (
    <form className="manage-form" onSubmit={(event) => void submit(event)} data-testid="new-webhook-form">
      <strong>New webhook</strong>
      <span className="check">
        <label htmlFor="new-webhook-name">Name</label>
        <input
          id="new-webhook-name"
          value={name}
          onChange={(e) => setName(e.target.value)}
          required
          data-testid="new-webhook-name"
        />
      </span>
      <span className="check">
        <label htmlFor="new-webhook-url">URL</label>
        <input
          id="new-webhook-url"
          type="url"
          value={url}
          onChange={(e) => setUrl(e.target.value)}
          required
          size={40}
          placeholder="https://…"
          data-testid="new-webhook-url"
        />
      </span>
      <span className="check">
        <label htmlFor="new-webhook-type">Type</label>
        <select
          id="new-webhook-type"
          value={webhookType}
          onChange={(e) => setWebhookType(e.target.value as "DEFAULT" | "SLACK")}
        >
          <option value="DEFAULT">default (JSON)</option>
          <option value="SLACK">Slack</option>
        </select>
      </span>
      <span className="check">
        <label htmlFor="new-webhook-mode">Mode</label>
        <select
          id="new-webhook-mode"
          value={admin ? mode : "SPECIFIC"}
          onChange={(e) => setMode(e.target.value as "SPECIFIC" | "WORKSPACE")}
          aria-describedby="new-webhook-mode-note"
        >
          <option value="SPECIFIC">specific</option>
          {admin ? <option value="WORKSPACE">workspace</option> : null}
        </select>
      </span>
      <span id="new-webhook-mode-note" className="muted">
        {admin && mode === "WORKSPACE"
          ? "every experiment"
          : "experiments whose config names it under integrations.webhooks"}
      </span>
      <fieldset data-testid="new-webhook-triggers">
        <legend>Triggers</legend>
        {rows.map((row, index) => (
          <TriggerEditor
            key={row.key}
            row={row}
            index={index}
            onChange={(patch) => change(row.key, patch)}
            onRemove={rows.length > 1 ? () => setRows(rows.filter((r) => r.key !== row.key)) : null}
          />
        ))}
        <button type="button" onClick={() => setRows([...rows, newRow()])}>
          Add trigger
        </button>
      </fieldset>
      <button
        type="submit"
        className="primary"
        disabled={saving || !name.trim() || !url.trim()}
        data-testid="new-webhook-create"
      >
        {saving ? "Creating…" : "Create"}
      </button>
      <ErrorBox error={error} />
    </form>
  );
}

/** One trigger: its kind and the fields of that kind's condition. */
function TriggerEditor({
  row,
  index,
  onChange,
  onRemove,
}: {
  row: TriggerRow;
  index: number;
  onChange: (patch: Partial<TriggerRow>) => void;
  onRemove: (() => void) | null;
}) {
  const id = (field: string) => `new-webhook-trigger-${row.key}-${field}`;
  const n = index + 1;
  return (
    <div className="toolbar" role="group" aria-label={`Trigger ${n}`} data-testid="trigger-row">
      <span className="check">
        <label htmlFor={id("type")}>Kind</label>
        <select
          id={id("type")}
          value={row.triggerType}
          onChange={(e) => onChange({ triggerType: e.target.value as TriggerType })}
        >
          {TRIGGER_TYPES.map((t) => (
            <option key={t.value} value={t.value}>
              {t.label}
            </option>
          ))}
        </select>
      </span>
      {row.triggerType === "EXPERIMENT_STATE_CHANGE" ? (
        <span className="check">
          <label htmlFor={id("state")}>State</label>
          <select id={id("state")} value={row.state} onChange={(e) => onChange({ state: e.target.value })}>
            {EXPERIMENT_STATES.map((state) => (
              <option key={state} value={state}>
                {state}
              </option>
            ))}
          </select>
        </span>
      ) : null}
      {row.triggerType === "METRIC_THRESHOLD_EXCEEDED" ? (
        <>
          <span className="check">
            <label htmlFor={id("group")}>Group</label>
            <select
              id={id("group")}
              value={row.metricGroup}
              onChange={(e) => onChange({ metricGroup: e.target.value as "validation" | "training" })}
            >
              <option value="validation">validation</option>
              <option value="training">training</option>
            </select>
          </span>
          <span className="check">
            <label htmlFor={id("metric")}>Metric</label>
            <input
              id={id("metric")}
              value={row.metricName}
              onChange={(e) => onChange({ metricName: e.target.value })}
              required
            />
          </span>
          <span className="check">
            <label htmlFor={id("op")}>Comparison</label>
            <select
              id={id("op")}
              value={row.compareOp}
              onChange={(e) => onChange({ compareOp: e.target.value as CompareOp })}
            >
              {COMPARE_OPS.map((op) => (
                <option key={op} value={op}>
                  {op}
                </option>
              ))}
            </select>
          </span>
          <span className="check">
            <label htmlFor={id("value")}>Value</label>
            <input
              id={id("value")}
              type="number"
              step="any"
              value={row.value}
              onChange={(e) => onChange({ value: e.target.value })}
              required
              size={8}
            />
          </span>
        </>
      ) : null}
      {row.triggerType === "TASK_LOG" ? (
        <span className="check">
          <label htmlFor={id("regex")}>Regex</label>
          <input
            id={id("regex")}
            className="mono"
            value={row.regex}
            onChange={(e) => onChange({ regex: e.target.value })}
            required
            size={30}
          />
        </span>
      ) : null}
      {onRemove ? (
        <button type="button" onClick={onRemove} aria-label={`Remove trigger ${n}`}>
          Remove
        </button>
      ) : null}
    </div>
  );
}

/** Each event of one webhook and how its sending went (`det webhook deliveries`). */
function Deliveries({ webhook }: { webhook: Webhook }) {
  const list = useData(
    () => api.webhookDeliveries(webhook.id),
    `deliveries-${webhook.id}`,
    DELIVERIES_REFRESH_MS,
  );
  const deliveries = list.data ?? [];
  return (
    <section aria-label={`Deliveries of ${webhook.name}`} data-testid="webhook-deliveries">
      <h2>Deliveries of {webhook.name}</h2>
      <ErrorBox error={list.error} />
      <div className="scroll">
        <table className="grid">
          <thead>
            <tr>
              <th scope="col">ID</th>
              <th scope="col">Event</th>
              <th scope="col">Experiment</th>
              <th scope="col">Status</th>
              <th scope="col">Attempts</th>
              <th scope="col">Last error</th>
              <th scope="col">Happened</th>
              <th scope="col">Delivered</th>
            </tr>
          </thead>
          <tbody>
            {deliveries.map((d) => (
              <tr key={d.id} data-testid="delivery-row" data-id={d.id}>
                <td>{d.id}</td>
                <td data-testid="delivery-event">{eventWords(d.triggerType, d.payload)}</td>
                <td>
                  {d.experimentId === null ? null : (
                    <a href={`#/experiments/${d.experimentId}`}>{d.experimentId}</a>
                  )}
                </td>
                <td data-testid="delivery-state">{d.state}</td>
                <td data-testid="delivery-attempts">{d.attempts}</td>
                <td className="mono">{d.lastError}</td>
                <td>{formatDate(d.createdAt)}</td>
                <td>{formatDate(d.deliveredAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {list.data && deliveries.length === 0 ? <p className="muted">No events yet.</p> : null}
      {!list.data && list.loading ? <p className="muted">Loading…</p> : null}
    </section>
  );
}

function eventWords(triggerType: string, payload: Record<string, unknown>): string {
  const condition = payload.condition;
  if (condition && typeof condition === "object") {
    return triggerWords({ triggerType, condition: condition as Record<string, unknown> });
  }
  return triggerType;
}
