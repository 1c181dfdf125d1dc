import type { Template } from "@doppio/contracts";

interface Props {
  templates: readonly Template[];
  value: string | null;
  onChange(name: string): void;
}

/** Radio cards: the template's title and description help pick; readiness says how fast it comes up. */
export function TemplatePicker({ templates, value, onChange }: Props) {
  return (
    <fieldset className="choices">
      <legend>Template</legend>
      {templates.map((t) => (
        <label key={t.name} className="choice">
          <input
            type="radio"
            name="template"
            value={t.name}
            checked={value === t.name}
            onChange={() => onChange(t.name)}
          />
          <span className="choice-body">
            <span className="choice-title">
              {t.title} <span className="muted small">v{t.version}</span>
            </span>
            <span className="choice-desc">{t.description}</span>
            {t.readyOn.length === 0 && (
              <span className="small warn-text">
                No server has this template ready yet; creating may wait.
              </span>
            )}
          </span>
        </label>
      ))}
    </fieldset>
  );
}
