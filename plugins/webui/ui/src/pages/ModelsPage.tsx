import { type FormEvent, useState } from "react";
import { api, errorText, type Model } from "../api";
import { ErrorBox } from "../components/ErrorBox";
import { SortHeader } from "../components/SortHeader";
import { formatDate } from "../format";
import { modelHref, modelPath } from "../models";
import { navigate } from "../router";
import { useSorted } from "../sorting";
import { useData } from "../useData";

const REFRESH_MS = 10000;

function sortValue(model: Model, key: string): unknown {
  return key === "labels" ? model.labels.join(", ") : model[key as keyof Model];
}

/** The model registry (`det model list`): each model with its number of versions. */
export function ModelsPage() {
  const list = useData(() => api.models(), "models", REFRESH_MS);
  const { sorted, sort, toggle } = useSorted(list.data ?? [], sortValue, {
    key: "last_updated_time",
    descending: true,
  });
  const header = (label: string, column: string) => (
    <SortHeader label={label} column={column} sort={sort} onSort={toggle} />
  );

  return (
    <section>
      <h1>Models</h1>
      <NewModelForm />
      <ErrorBox error={list.error} />
      <div className="scroll">
        <table className="grid" data-testid="models-table">
          <thead>
            <tr>
              {header("Name", "name")}
              {header("Description", "description")}
              {header("Labels", "labels")}
              {header("Versions", "num_versions")}
              {header("Owner", "owner")}
              {header("Last updated", "last_updated_time")}
            </tr>
          </thead>
          <tbody>
            {sorted.map((m) => (
              <tr key={m.id} data-testid="model-row" data-id={m.name}>
                <td>
                  <a href={modelHref(m.id)} data-testid="model-link">
                    {m.name}
                  </a>{" "}
                  {m.archived ? <span className="tag">archived</span> : null}
                </td>
                <td>{m.description}</td>
                <td>
                  {m.labels.map((label) => (
                    <span key={label} className="tag">
                      {label}
                    </span>
                  ))}
                </td>
                <td data-testid="model-versions">{m.num_versions}</td>
                <td>{m.owner}</td>
                <td>{formatDate(m.last_updated_time)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {list.data && sorted.length === 0 ? (
        <p className="muted">No models yet: create one here, or register a checkpoint from an experiment.</p>
      ) : null}
      {!list.data && list.loading ? <p className="muted">Loading…</p> : null}
    </section>
  );
}

/** Creates a model (`det model create`) and opens its page. */
function NewModelForm() {
  const [name, setName] = useState("");
  const [description, setDescription] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [saving, setSaving] = useState(false);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setSaving(true);
    setError(null);
    try {
      const created = await api.createModel({ name: name.trim(), description });
      navigate(modelPath(created.id));
    } catch (err) {
      setError(errorText(err));
    } finally {
      setSaving(false);
    }
  };

  return (
    <form className="manage-form" onSubmit={(event) => void submit(event)} data-testid="new-model-form">
      <strong>New model</strong>
      <span className="check">
        <label htmlFor="new-model-name">Name</label>
        <input
          id="new-model-name"
          value={name}
          onChange={(e) => setName(e.target.value)}
          required
          data-testid="new-model-name"
        />
      </span>
      <span className="check">
        <label htmlFor="new-model-description">Description</label>
        <input
          id="new-model-description"
          value={description}
          onChange={(e) => setDescription(e.target.value)}
          size={40}
          data-testid="new-model-description"
        />
      </span>
      <button
        type="submit"
        className="primary"
        disabled={saving || !name.trim()}
        data-testid="new-model-create"
      >
        {saving ? "Creating…" : "Create"}
      </button>
      <ErrorBox error={error} />
    </form>
  );
}
