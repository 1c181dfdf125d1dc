import { formatMoney } from "@doppio/contracts";
import { describe, expect, it } from "vitest";
import { parseAmount } from "../src/lib/money.ts";

describe("money in the dashboard (integer minor units only)", () => {
  it("parses what people type into minor units without floats", () => {
    expect(parseAmount("20")).toBe(2000);
    expect(parseAmount("12.5")).toBe(1250);
    expect(parseAmount("12,05")).toBe(1205);
    // 0.1 + 0.2 style drift cannot happen: 0.29 is exactly 29.
    expect(parseAmount("0.29")).toBe(29);
    for (const bad of ["", "abc", "1.234", "-5", "1e3", "12.", ".5", "99999999"])
      expect(parseAmount(bad)).toBeNull();
  });

  it("formats minor units for people, negatives included", () => {
    expect(formatMoney(1234, "EUR")).toBe("12.34 EUR");
    expect(formatMoney(-5, "EUR")).toBe("-0.05 EUR");
    expect(formatMoney(0, "EUR")).toBe("0.00 EUR");
  });
});
