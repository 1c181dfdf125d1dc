#!/usr/bin/env bash
# Packages the extension as a .vsix (a zip: extension.vsixmanifest, [Content_Types].xml and
# the extension under extension/) with Debian's zip; nothing is downloaded.
#   extensions/doppio-devbox/pack.sh OUT.vsix
set -euo pipefail
out=$(realpath -m "${1:?usage: pack.sh OUT.vsix}")
src=$(cd "$(dirname "$0")" && pwd)
command -v zip > /dev/null || { echo "pack.sh: zip missing (apt-get install zip)" >&2; exit 1; }
field() { node -e 'process.stdout.write(String(require(process.argv[1])[process.argv[2]]))' "$src/package.json" "$1"; }
name=$(field name)
publisher=$(field publisher)
version=$(field version)
display=$(field displayName)
desc=$(field description)
engine=$(node -e 'process.stdout.write(require(process.argv[1]).engines.vscode)' "$src/package.json")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/extension"
cp "$src/package.json" "$src/extension.js" "$src/README.md" "$work/extension/"
cat > "$work/extension.vsixmanifest" <<XML
<?xml version="1.0" encoding="utf-8"?>
<PackageManifest Version="2.0.0" xmlns="http://schemas.microsoft.com/developer/vsx-schema/2011" xmlns:d="http://schemas.microsoft.com/developer/vsx-schema-design/2011">
  <Metadata>
    <Identity Language="en-US" Id="$name" Version="$version" Publisher="$publisher" />
    <DisplayName>$display</DisplayName>
    <Description xml:space="preserve">$desc</Description>
    <Categories>Other</Categories>
    <Properties>
      <Property Id="Microsoft.VisualStudio.Code.Engine" Value="$engine" />
    </Properties>
  </Metadata>
  <Installation>
    <InstallationTarget Id="Microsoft.VisualStudio.Code" />
  </Installation>
  <Dependencies />
  <Assets>
    <Asset Type="Microsoft.VisualStudio.Code.Manifest" Path="extension/package.json" Addressable="true" />
    <Asset Type="Microsoft.VisualStudio.Services.Content.Details" Path="extension/README.md" Addressable="true" />
  </Assets>
</PackageManifest>
XML
cat > "$work/[Content_Types].xml" <<'XML'
<?xml version="1.0" encoding="utf-8"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">
  <Default Extension=".json" ContentType="application/json" />
  <Default Extension=".js" ContentType="application/javascript" />
  <Default Extension=".md" ContentType="text/markdown" />
  <Default Extension=".vsixmanifest" ContentType="text/xml" />
</Types>
XML
rm -f "$out.tmp"
(cd "$work" && TZ=UTC touch -t 202001010000 extension.vsixmanifest '[Content_Types].xml' extension extension/* &&
  zip -q -X -r "$out.tmp" extension.vsixmanifest '[Content_Types].xml' extension)
mv "$out.tmp" "$out"
echo "packed $out"
