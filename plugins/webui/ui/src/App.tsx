import { ComparePage } from "./pages/ComparePage";
import { ExperimentPage } from "./pages/ExperimentPage";
import { ExperimentsPage } from "./pages/ExperimentsPage";
import { ModelPage } from "./pages/ModelPage";
import { ModelsPage } from "./pages/ModelsPage";
import { ProjectPage, WorkspacePage, WorkspacesPage } from "./pages/WorkspacesPage";
import { OpeningPage, OpenTaskPage } from "./pages/OpenTaskPage";
import { QueuePage } from "./pages/QueuePage";
import { ResolvePage } from "./pages/ResolvePage";
import { TaskPage } from "./pages/TaskPage";
import { TasksPage } from "./pages/TasksPage";
import { TrialPage } from "./pages/TrialPage";
import { WebhooksPage } from "./pages/WebhooksPage";
import { type Route, useRoute } from "./router";

export function App() {
  const route = useRoute();
  return (
    <>
      <nav className="topbar">
        <span className="brand">det</span>
        <a
          href="#/experiments"
          data-testid="nav-experiments"
          className={section(route) === "experiments" ? "current" : ""}
        >
          Experiments
        </a>
        <a href="#/queue" data-testid="nav-queue" className={section(route) === "queue" ? "current" : ""}>
          Job queue
        </a>
        <a href="#/tasks" data-testid="nav-tasks" className={section(route) === "tasks" ? "current" : ""}>
          Tasks
        </a>
        <a href="#/models" data-testid="nav-models" className={section(route) === "models" ? "current" : ""}>
          Models
        </a>
        <a
          href="#/workspaces"
          data-testid="nav-workspaces"
          className={section(route) === "workspaces" ? "current" : ""}
        >
          Workspaces
        </a>
        <a
          href="#/webhooks"
          data-testid="nav-webhooks"
          className={section(route) === "webhooks" ? "current" : ""}
        >
          Webhooks
        </a>
      </nav>
      <main>
        <Page route={route} />
      </main>
    </>
  );
}

function section(route: Route): string {
  switch (route.page) {
    case "queue":
      return "queue";
    case "tasks":
    case "task":
    case "openTask":
    case "opening":
      return "tasks";
    case "models":
    case "model":
      return "models";
    case "workspaces":
    case "workspace":
    case "project":
      return "workspaces";
    case "webhooks":
      return "webhooks";
    default:
      return "experiments";
  }
}

function Page({ route }: { route: Route }) {
  switch (route.page) {
    case "experiments":
      return <ExperimentsPage />;
    case "experiment":
      return <ExperimentPage key={route.id} id={route.id} />;
    case "compare":
      return (
        <ComparePage
          key={`${route.experiments.join(",")}|${route.trials.join(",")}`}
          experimentIds={route.experiments}
          trialIds={route.trials}
        />
      );
    case "trial":
      return <TrialPage key={route.id} id={route.id} />;
    case "queue":
      return <QueuePage />;
    case "tasks":
      return <TasksPage />;
    case "models":
      return <ModelsPage />;
    case "model":
      return <ModelPage key={route.name} name={route.name} />;
    case "workspaces":
      return <WorkspacesPage />;
    case "workspace":
      return <WorkspacePage key={route.id} id={route.id} />;
    case "project":
      return <ProjectPage key={route.id} id={route.id} />;
    case "webhooks":
      return <WebhooksPage />;
    case "task":
      return <TaskPage key={route.id} id={route.id} />;
    case "openTask":
      return <OpenTaskPage key={route.id} id={route.id} />;
    case "opening":
      return <OpeningPage />;
    case "resolve":
      return <ResolvePage dagId={route.dagId} runId={route.runId} mapIndex={route.mapIndex} />;
    case "unknown":
      return (
        <p className="error" data-testid="error">
          No page at #{route.path}.
        </p>
      );
  }
}
