import { type FormEvent, useEffect, useState } from "react";
import { api, type Checkpoint, errorText, type ModelVersion } from "../api";
import { modelHref } from "../models";
import { useData } from "../useData";
import { ErrorBox } from "./ErrorBox";

/** The select's value that means "a model made here, with the name typed next to it". */
const NEW_MODEL = "";

/** A row's "Register" button: registers a COMPLETED checkpoint as the next version of a model. */
export function RegisterCheckpoint({ checkpoint }: { checkpoint: Checkpoint }) {
  const [open, setOpen] = useState(false);
  if (checkpoint.state !== "COMPLETED") return null;
  return (
    <>
      <button type="button" onClick={() => setOpen(true)} data-testid="register-checkpoint">
        Register
      </button>
      {open ? <RegisterDialog checkpoint={checkpoint} onClose={() => setOpen(false)} /> : null}
    </>
  );
}

function RegisterDialog({ checkpoint, onClose }: { checkpoint: Checkpoint; onClose: () => void }) {
  const models = useData(() => api.models(), "models");
  const [choice, setChoice] = useState<string | null>(null);
  const [newName, setNewName] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [saving, setSaving] = useState(false);
  const [registered, setRegistered] = useState<ModelVersion | null>(null);

  useEffect(() => {
    const onKey = (event: KeyboardEvent) => {
      if (event.key === "Escape") onClose();
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, [onClose]);

  const open = (models.data ?? []).filter((m) => !m.archived);
  // Until the user picks, an existing model is offered first when there is one.
  // An existing model is chosen by its id: two users' models may share a name.
  const selected = choice ?? (open[0] ? String(open[0].id) : NEW_MODEL);
  const name = newName.trim();

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setSaving(true);
    setError(null);
    try {
      let target = selected;
      if (selected === NEW_MODEL) {
        const created = await api.createModel({ name });
        target = String(created.id);
        // Made now: a retry after a failed registration registers into it instead of making it again.
        setChoice(target);
        models.reload();
      }
      setRegistered(await api.registerVersion(target, { checkpoint_uuid: checkpoint.uuid }));
    } catch (err) {
      setError(errorText(err));
    } finally {
      setSaving(false);
    }
  };

  return (
    <div className="overlay" role="presentation" onClick={onClose}>
      <div
        className="dialog"
        role="dialog"
        aria-modal="true"
        aria-labelledby="register-title"
        onClick={(event) => event.stopPropagation()}
        data-testid="register-dialog"
      >
        <h2 id="register-title">Register checkpoint</h2>
        <p className="mono">{checkpoint.uuid}</p>
        {registered ? (
          <>
            <p data-testid="register-done">
              Registered as version {registered.version} of{" "}
              <a href={modelHref(registered.model_id)} data-testid="register-model-link">
                {registered.model_name}
              </a>
              .
            </p>
            <div className="buttons">
              <button
                type="button"
                className="primary"
                onClick={onClose}
                autoFocus
                data-testid="register-close"
              >
                Close
              </button>
            </div>
          </>
        ) : (
          <form onSubmit={(event) => void submit(event)}>
            <div className="manage-form">
              <span className="check">
                <label htmlFor="register-model">Model</label>
                <select
                  id="register-model"
                  value={selected}
                  onChange={(e) => setChoice(e.target.value)}
                  autoFocus
                  data-testid="register-model"
                >
                  {open.map((m) => (
                    <option key={m.id} value={String(m.id)}>
                      {m.owner ? `${m.name} (${m.owner})` : m.name}
                    </option>
                  ))}
                  <option value={NEW_MODEL}>New model…</option>
                </select>
              </span>
              {selected === NEW_MODEL ? (
                <span className="check">
                  <label htmlFor="register-new-name">New model name</label>
                  <input
                    id="register-new-name"
                    value={newName}
                    onChange={(e) => setNewName(e.target.value)}
                    required
                    data-testid="register-new-name"
                  />
                </span>
              ) : null}
            </div>
            <ErrorBox error={error ?? models.error} />
            <div className="buttons">
              <button type="button" onClick={onClose} data-testid="register-cancel">
                Cancel
              </button>
              <button type="submit" className="primary" disabled={saving || !name} data-testid="register-ok">
                {saving ? "Registering…" : "Register"}
              </button>
            </div>
          </form>
        )}
      </div>
    </div>
  );
}
