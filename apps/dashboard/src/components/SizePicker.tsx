import type { BoxSizeName, SIZES } from "@doppio/contracts";
import { formatMemory } from "../lib/labels.ts";

interface Props {
  sizes: typeof SIZES;
  value: BoxSizeName | null;
  onChange(size: BoxSizeName): void;
}

export function SizePicker({ sizes, value, onChange }: Props) {
  return (
    <fieldset className="choices choices-row">
      <legend>Size</legend>
      {sizes.map((s) => (
        <label key={s.name} className="choice">
          <input
            type="radio"
            name="size"
            value={s.name}
            checked={value === s.name}
            onChange={() => onChange(s.name as BoxSizeName)}
          />
          <span className="choice-body">
            <span className="choice-title">{s.name[0]!.toUpperCase() + s.name.slice(1)}</span>
            <span className="choice-desc">
              {s.vcpu} vCPU · {formatMemory(s.memoryMb)} · {s.diskGb} GB disk
            </span>
          </span>
        </label>
      ))}
    </fieldset>
  );
}
