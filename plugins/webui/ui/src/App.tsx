import { ExperimentPage } from "./pages/ExperimentPage";
import { ExperimentsPage } from "./pages/ExperimentsPage";
import { OpeningPage, OpenTaskPage } from "./pages/OpenTaskPage";
import { QueuePage } from "./pages/QueuePage";
import { ResolvePage } from "./pages/ResolvePage";
import { TaskPage } from "./pages/TaskPage";
import { TasksPage } from "./pages/TasksPage";
import { TrialPage } from "./pages/TrialPage";
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
    case "trial":
      return <TrialPage key={route.id} id={route.id} />;
    case "queue":
      return <QueuePage />;
    case "tasks":
      return <TasksPage />;
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
