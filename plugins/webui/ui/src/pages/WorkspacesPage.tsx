import DOMPurify from "dompurify";
import { Marked } from "marked";
import { type FormEvent, useMemo, useState } from "react";
import { api, errorText, type Experiment, type Project } from "../api";
import { ErrorBox } from "../components/ErrorBox";
import { SortHeader } from "../components/SortHeader";
import { DASH, formatDate, formatPercent } from "../format";
import { navigate } from "../router";
import { useSorted } from "../sorting";
import { stateClass } from "../states";
import { useData } from "../useData";

const REFRESH_MS = 10000;

// HTML written in the notes is shown as text, not interpreted; DOMPurify cleans what Markdown makes.
const markdown = new Marked({
  renderer: {
    html: ({ text }) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;"),
  },
});

function notesHtml(notes: string): string {
  return DOMPurify.sanitize(markdown.parse(notes, { async: false }));
}

function byKey<T>(row: T, key: string): unknown {
  return row[key as keyof T];
}

/** Workspaces (`det workspace list`), each opening its projects. */
export function WorkspacesPage() {
  const list = useData(() => api.workspaces(), "workspaces", REFRESH_MS);
  const { sorted, sort, toggle } = useSorted(list.data ?? [], byKey, { key: "id", descending: false });
  const header = (label: string, column: string) => (
    <SortHeader label={label} column={column} sort={sort} onSort={toggle} />
  );
  return (
    <section>
      <h1>Workspaces</h1>
      <NewNameForm
        what="workspace"
        create={async (name) => navigate(`/workspaces/${(await api.createWorkspace(name)).id}`)}
      />
      <ErrorBox error={list.error} />
      <div className="scroll">
        <table className="grid" data-testid="workspaces-table">
          <thead>
            <tr>
              {header("Name", "name")}
              {header("Projects", "num_projects")}
              {header("Created by", "created_by")}
              {header("Created", "created_at")}
            </tr>
          </thead>
          <tbody>
            {sorted.map((w) => (
              <tr key={w.id} data-testid="workspace-row">
                <td>
                  <a href={`#/workspaces/${w.id}`} data-testid="workspace-link">
                    {w.name}
                  </a>
                </td>
                <td>{w.num_projects}</td>
                <td>{w.created_by}</td>
                <td>{formatDate(w.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {!list.data && list.loading ? <p className="muted">Loading…</p> : null}
    </section>
  );
}

/** A workspace's projects (`det project list WORKSPACE`). */
export function WorkspacePage({ id }: { id: number }) {
  const answer = useData(() => api.projects(id), `workspace:${id}`, REFRESH_MS);
  const { sorted, sort, toggle } = useSorted(answer.data?.projects ?? [], byKey, {
    key: "id",
    descending: false,
  });
  if (!answer.data) {
    return answer.error ? (
      <ErrorBox error={answer.error} />
    ) : (
      <p className="muted">Loading workspace {id}…</p>
    );
  }
  const header = (label: string, column: string) => (
    <SortHeader label={label} column={column} sort={sort} onSort={toggle} />
  );
  return (
    <section>
      <p className="muted">
        <a href="#/workspaces">Workspaces</a> /
      </p>
      <h1 data-testid="workspace-name">{answer.data.workspace.name}</h1>
      <NewNameForm
        what="project"
        create={async (name) => navigate(`/projects/${(await api.createProject(id, { name })).id}`)}
      />
      <div className="scroll">
        <table className="grid" data-testid="projects-table">
          <thead>
            <tr>
              {header("Name", "name")}
              {header("Description", "description")}
              {header("Experiments", "num_experiments")}
              {header("Active", "num_active_experiments")}
              {header("Created by", "created_by")}
            </tr>
          </thead>
          <tbody>
            {sorted.map((p) => (
              <tr key={p.id} data-testid="project-row">
                <td>
                  <a href={`#/projects/${p.id}`} data-testid="project-link">
                    {p.name}
                  </a>
                </td>
                <td>{p.description}</td>
                <td>{p.num_experiments}</td>
                <td>{p.num_active_experiments}</td>
                <td>{p.created_by}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

/** A project: its experiments (those the viewer may read) and its Markdown notes. */
export function ProjectPage({ id }: { id: number }) {
  const project = useData(() => api.project(id), `project:${id}`);
  const [showArchived, setShowArchived] = useState(false);
  const experiments = useData(
    () => api.projectExperiments(id, showArchived),
    `project-experiments:${id}:${showArchived}`,
    REFRESH_MS,
  );
  if (!project.data) {
    return project.error ? (
      <ErrorBox error={project.error} />
    ) : (
      <p className="muted">Loading project {id}…</p>
    );
  }
  const p = project.data;
  return (
    <section>
      <p className="muted">
        <a href="#/workspaces">Workspaces</a> /{" "}
        <a href={`#/workspaces/${p.workspace_id}`}>{p.workspace_name}</a> /
      </p>
      <h1 data-testid="project-name">{p.name}</h1>
      {p.description ? <p>{p.description}</p> : null}
      <h2>Experiments</h2>
      <label className="check">
        <input type="checkbox" checked={showArchived} onChange={(e) => setShowArchived(e.target.checked)} />{" "}
        Show archived
      </label>
      <ErrorBox error={experiments.error} />
      <ExperimentTable experiments={experiments.data ?? []} />
      <h2>Notes</h2>
      <Notes key={p.notes} project={p} onSaved={project.reload} />
    </section>
  );
}

function ExperimentTable({ experiments }: { experiments: Experiment[] }) {
  const { sorted, sort, toggle } = useSorted(experiments, byKey, { key: "id", descending: true });
  const header = (label: string, column: string) => (
    <SortHeader label={label} column={column} sort={sort} onSort={toggle} />
  );
  return (
    <div className="scroll">
      <table className="grid" data-testid="project-experiments">
        <thead>
          <tr>
            {header("ID", "id")}
            {header("Name", "name")}
            {header("State", "state")}
            {header("Progress", "progress")}
            {header("Owner", "owner")}
            {header("Started", "start_time")}
            {header("Trials", "num_trials")}
          </tr>
        </thead>
        <tbody>
          {sorted.map((e) => (
            <tr key={e.id} data-testid="project-experiment-row">
              <td>
                <a href={`#/experiments/${e.id}`}>{e.id}</a>
              </td>
              <td>{e.name}</td>
              <td>
                <span className={stateClass(e.state)}>{e.state}</span>
              </td>
              <td>{formatPercent(e.progress)}</td>
              <td>{e.owner}</td>
              <td>{formatDate(e.start_time)}</td>
              <td>{e.num_trials ?? DASH}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {sorted.length === 0 ? <p className="muted">No experiments here that you may read.</p> : null}
    </div>
  );
}

/** The notes rendered from Markdown (sanitized: no raw HTML survives), with an editor. */
function Notes({ project, onSaved }: { project: Project; onSaved: () => void }) {
  const [editing, setEditing] = useState(false);
  const [text, setText] = useState(project.notes);
  const [saving, setSaving] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const html = useMemo(() => notesHtml(project.notes), [project.notes]);

  const save = async () => {
    setSaving(true);
    setError(null);
    try {
      await api.updateProject(project.id, { notes: text });
      setEditing(false);
      onSaved();
    } catch (err) {
      setError(errorText(err));
    } finally {
      setSaving(false);
    }
  };

  if (editing) {
    return (
      <div className="manage-form">
        <textarea
          value={text}
          onChange={(e) => setText(e.target.value)}
          rows={12}
          cols={100}
          aria-label="Notes (Markdown)"
          data-testid="project-notes-editor"
        />
        <div className="toolbar">
          <button
            className="primary"
            onClick={() => void save()}
            disabled={saving}
            data-testid="project-notes-save"
          >
            {saving ? "Saving…" : "Save"}
          </button>
          <button
            onClick={() => {
              setText(project.notes);
              setEditing(false);
            }}
            disabled={saving}
          >
            Cancel
          </button>
        </div>
        <ErrorBox error={error} />
      </div>
    );
  }
  return (
    <div>
      {project.notes ? (
        <div className="notes" data-testid="project-notes" dangerouslySetInnerHTML={{ __html: html }} />
      ) : (
        <p className="muted" data-testid="project-notes">
          No notes yet.
        </p>
      )}
      <button onClick={() => setEditing(true)} data-testid="project-notes-edit">
        Edit
      </button>
    </div>
  );
}

/** A one-field form that creates a workspace or project and opens it. */
function NewNameForm({ what, create }: { what: string; create: (name: string) => Promise<void> }) {
  const [name, setName] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [saving, setSaving] = useState(false);
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setSaving(true);
    setError(null);
    try {
      await create(name.trim());
    } catch (err) {
      setError(errorText(err));
    } finally {
      setSaving(false);
    }
  };
  return (
    <form className="manage-form" onSubmit={(event) => void submit(event)} data-testid={`new-${what}-form`}>
      <strong>New {what}</strong>
      <span className="check">
        <label htmlFor={`new-${what}-name`}>Name</label>
        <input
          id={`new-${what}-name`}
          value={name}
          onChange={(e) => setName(e.target.value)}
          required
          data-testid={`new-${what}-name`}
        />
      </span>
      <button
        type="submit"
        className="primary"
        disabled={saving || !name.trim()}
        data-testid={`new-${what}-create`}
      >
        {saving ? "Creating…" : "Create"}
      </button>
      <ErrorBox error={error} />
    </form>
  );
}
