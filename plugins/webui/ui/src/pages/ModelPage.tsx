import { type FormEvent, useState } from "react";
import { api, errorText, type Model, type ModelVersion } from "../api";
import { ErrorBox } from "../components/ErrorBox";
import { DASH, formatDate, formatValue } from "../format";
import { useData } from "../useData";

/** One model of the registry: what it is, and the checkpoints registered as its versions. */
export function ModelPage({ name }: { name: string }) {
  const answer = useData(() => api.modelVersions(name), `model:${name}`);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const model = answer.data?.model;
  if (!model)
    return answer.error ? <ErrorBox error={answer.error} /> : <p className="muted">Loading model {name}…</p>;

  const setArchived = async (archived: boolean) => {
    setBusy(true);
    setError(null);
    try {
      await api.archiveModel(String(model.id), archived);
      answer.reload();
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <section>
      <p className="crumbs">
        <a href="#/models">Models</a> / {model.name}
      </p>
      <h1 data-testid="model-name">
        {model.name} {model.archived ? <span className="tag">archived</span> : null}
      </h1>
      <div className="summary">
        <span>Owner: {model.owner}</span>
        <span>Versions: {model.num_versions}</span>
        <span>Created: {formatDate(model.creation_time)}</span>
        <span>Last updated: {formatDate(model.last_updated_time)}</span>
      </div>
      <div className="toolbar">
        <button
          type="button"
          disabled={busy}
          onClick={() => void setArchived(!model.archived)}
          data-testid={model.archived ? "model-unarchive" : "model-archive"}
        >
          {model.archived ? "Unarchive" : "Archive"}
        </button>
        {model.archived ? <span className="muted">An archived model takes no new versions.</span> : null}
      </div>
      <ErrorBox error={error ?? answer.error} />
      <ModelForm key={model.last_updated_time} model={model} onSaved={answer.reload} />

      <h2>Versions</h2>
      <Versions versions={answer.data?.model_versions ?? []} />
    </section>
  );
}

function parseLabels(text: string): string[] {
  return [...new Set(text.split(",").map((label) => label.trim()))].filter(Boolean);
}

/** Description, labels and notes, saved together (`det model update`-style: fields replaced whole). */
function ModelForm({ model, onSaved }: { model: Model; onSaved: () => void }) {
  const [description, setDescription] = useState(model.description);
  const [labels, setLabels] = useState(model.labels.join(", "));
  const [notes, setNotes] = useState(model.notes);
  const [error, setError] = useState<string | null>(null);
  const [saving, setSaving] = useState(false);
  const changed =
    description !== model.description ||
    notes !== model.notes ||
    parseLabels(labels).join(",") !== model.labels.join(",");

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setSaving(true);
    setError(null);
    try {
      await api.updateModel(String(model.id), { description, notes, labels: parseLabels(labels) });
      onSaved();
    } catch (err) {
      setError(errorText(err));
      setSaving(false);
    }
  };

  return (
    <form onSubmit={(event) => void submit(event)} data-testid="model-form">
      <div className="manage-form">
        <span className="check">
          <label htmlFor="model-description">Description</label>
          <input
            id="model-description"
            value={description}
            onChange={(e) => setDescription(e.target.value)}
            size={60}
            data-testid="model-description"
          />
        </span>
        <span className="check">
          <label htmlFor="model-labels">Labels</label>
          <input
            id="model-labels"
            value={labels}
            onChange={(e) => setLabels(e.target.value)}
            placeholder="comma, separated"
            size={30}
            data-testid="model-labels"
          />
        </span>
      </div>
      <div>
        <label htmlFor="model-notes">Notes</label>
      </div>
      <textarea
        id="model-notes"
        value={notes}
        onChange={(e) => setNotes(e.target.value)}
        rows={5}
        cols={100}
        data-testid="model-notes"
      />
      <div className="toolbar">
        <button type="submit" className="primary" disabled={saving || !changed} data-testid="model-save">
          {saving ? "Saving…" : "Save"}
        </button>
        {changed ? <span className="muted">Unsaved changes</span> : null}
      </div>
      <ErrorBox error={error} />
    </form>
  );
}

function Versions({ versions }: { versions: ModelVersion[] }) {
  if (versions.length === 0)
    return (
      <p className="muted">No versions yet: register a checkpoint from an experiment's or a trial's page.</p>
    );
  return (
    <div className="scroll">
      <table className="grid" data-testid="versions-table">
        <thead>
          <tr>
            <th>Version</th>
            <th>Name</th>
            <th>Checkpoint</th>
            <th>Trial</th>
            <th>Experiment</th>
            <th>Validation metrics</th>
            <th>Owner</th>
            <th>Created</th>
          </tr>
        </thead>
        <tbody>
          {[...versions].reverse().map((v) => (
            <tr key={v.id} data-testid="version-row" data-id={v.version}>
              <td data-testid="version-number">{v.version}</td>
              <td>{v.name || DASH}</td>
              <td className="mono" data-testid="version-checkpoint">
                {v.checkpoint.uuid}
              </td>
              <td>
                <a href={`#/trials/${v.checkpoint.trial_id}`}>{v.checkpoint.trial_id}</a>
              </td>
              <td>
                <a href={`#/experiments/${v.checkpoint.experiment_id}`}>{v.checkpoint.experiment_id}</a>
              </td>
              <td data-testid="version-metrics">
                {Object.keys(v.validation_metrics).length === 0
                  ? DASH
                  : Object.entries(v.validation_metrics)
                      .sort(([a], [b]) => a.localeCompare(b))
                      .map(([metric, value]) => `${metric}: ${formatValue(value)}`)
                      .join(", ")}
              </td>
              <td>{v.owner}</td>
              <td>{formatDate(v.creation_time)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
