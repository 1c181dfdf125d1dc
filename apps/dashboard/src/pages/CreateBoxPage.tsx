import { type BoxSizeName, SIZES, slugProblem } from "@doppio/contracts";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { type FormEvent, useEffect, useState } from "react";
import { putBox } from "../api/cache.ts";
import { call, errorText } from "../api/client.ts";
import { keys } from "../api/keys.ts";
import { useGitHub, useTemplates } from "../api/queries.ts";
import { ErrorNotice } from "../components/ErrorNotice.tsx";
import { Loading } from "../components/Loading.tsx";
import { SizePicker } from "../components/SizePicker.tsx";
import { TemplatePicker } from "../components/TemplatePicker.tsx";
import { navigate } from "../lib/router.tsx";

export function CreateBoxPage() {
  const qc = useQueryClient();
  const templates = useTemplates();
  const [template, setTemplate] = useState<string | null>(null);
  const [size, setSize] = useState<BoxSizeName | null>(null);
  const [name, setName] = useState("");
  const [touched, setTouched] = useState(false);
  const github = useGitHub();
  const [repo, setRepo] = useState("");
  const repos = github.data?.repositories ?? [];

  // Default to the first template and its default size once they load.
  useEffect(() => {
    const first = templates.data?.[0];
    if (first && template === null) {
      setTemplate(first.name);
      setSize(first.defaultSize);
    }
  }, [templates.data, template]);

  const nameProblem = name === "" ? null : slugProblem(name);
  const create = useMutation({
    mutationFn: () =>
      call("createBox", {
        body: {
          template: template ?? "",
          ...(size ? { size } : {}),
          ...(name ? { name } : {}),
          ...(repo ? { repo } : {}),
        },
      }),
    onSuccess: ({ box, job }) => {
      putBox(qc, box);
      qc.setQueryData(keys.jobs(box.slug), [job]);
      navigate(`/boxes/${box.slug}`);
    },
  });

  const submit = (e: FormEvent) => {
    e.preventDefault();
    setTouched(true);
    if (!template || nameProblem) return;
    create.mutate();
  };

  if (templates.isPending) return <Loading label="Loading templates…" />;
  if (templates.isError) return <ErrorNotice error={templates.error} onRetry={() => templates.refetch()} />;

  return (
    <>
      <div className="page-head">
        <h1>Create a box</h1>
      </div>
      <form className="create-form" onSubmit={submit} noValidate>
        {templates.data.length === 0 ? (
          <p className="notice">No templates are available yet. An administrator needs to add one.</p>
        ) : (
          <TemplatePicker templates={templates.data} value={template} onChange={setTemplate} />
        )}
        <SizePicker sizes={SIZES} value={size} onChange={setSize} />
        <div className="field">
          <label htmlFor="box-name">Name (optional)</label>
          <input
            id="box-name"
            name="name"
            className="mono"
            placeholder="leave empty for a generated name"
            autoComplete="off"
            spellCheck={false}
            autoCapitalize="off"
            value={name}
            aria-invalid={nameProblem && touched ? true : undefined}
            aria-describedby="box-name-help"
            onChange={(e) => {
              setName(e.target.value);
              setTouched(true);
            }}
          />
          <small id="box-name-help" className={nameProblem && touched ? "error-text" : "hint"}>
            {nameProblem && touched
              ? `The name ${nameProblem}.`
              : "Used in the box's URLs: lowercase letters, digits and hyphens."}
          </small>
        </div>
        {repos.length > 0 && (
          <div className="field">
            <label htmlFor="box-repo">GitHub repository (optional)</label>
            <select id="box-repo" name="repo" value={repo} onChange={(e) => setRepo(e.target.value)}>
              <option value="">none</option>
              {repos.map((r) => (
                <option key={`${r.installationId}/${r.fullName}`} value={r.fullName}>
                  {r.fullName}
                </option>
              ))}
            </select>
            <small className="hint">Pushes from the box use a short-lived token for this repository.</small>
          </div>
        )}
        {create.isError && (
          <div className="notice notice-error" role="alert">
            <p>{errorText(create.error)}</p>
          </div>
        )}
        <div className="row-actions">
          <button type="submit" className="btn btn-primary" disabled={create.isPending || !template}>
            {create.isPending ? "Creating…" : "Create box"}
          </button>
        </div>
      </form>
    </>
  );
}
