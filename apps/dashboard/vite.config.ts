import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// Served by the control plane under /dashboard/ (apps/api/src/app.ts).
export default defineConfig({
  root: import.meta.dirname,
  base: "/dashboard/",
  plugins: [react()],
  build: { outDir: "dist", emptyOutDir: true, sourcemap: true },
  server: { proxy: { "/api": "http://127.0.0.1:8080" } },
});
