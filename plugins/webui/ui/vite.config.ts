import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// The pages are served at /det/ui/ behind any base path Airflow runs under, so every asset URL is
// relative; the bundle goes to the plugin's static folder, which the det FastAPI app serves.
export default defineConfig({
  base: "./",
  plugins: [react()],
  build: {
    outDir: "../static",
    emptyOutDir: true,
    chunkSizeWarningLimit: 400,
  },
});
