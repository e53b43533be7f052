/**
 * What the real providers refuse in an input (image, PDF) before any inference, with their recorded
 * messages, so an input Sluice lets through reaches the fake as it would reach them: the provider's
 * 400 (Sluice's 502) on every call.
 */

/** Provider B's image limit: the base64 text of one image, at most 5 MiB (not the decoded bytes). */
const providerBMaxImageBase64 = 5 * 1024 * 1024;
/** Provider B's largest image side, in pixels (2000 with more than 20 images; Sluice sends one). */
const providerBMaxImageSide = 8000;

/**
 * Provider B (`/v1/messages`): an image whose base64 exceeds 5 MB (recorded: "messages.0.content.0.
 * image.source.base64: image exceeds 5 MB maximum: 6500712 bytes > 5242880 bytes") or a side over
 * 8000 px (recorded: "….image.source.base64.data: At least one of the image dimensions exceed max
 * allowed size: 8000 pixels"). The fake reads the size of a PNG only (its IHDR), which the tests send.
 */
export function providerBInputRefusal(messages: unknown): string | null {
  if (!Array.isArray(messages)) return null;
  for (const [messageIndex, message] of messages.entries()) {
    const content = (message as { content?: unknown }).content;
    if (!Array.isArray(content)) continue;
    for (const [blockIndex, block] of content.entries()) {
      const source = (block as { type?: string; source?: { type?: string; data?: unknown } }).source;
      if ((block as { type?: string }).type !== "image" || source?.type !== "base64") continue;
      if (typeof source.data !== "string") continue;
      const path = `messages.${messageIndex}.content.${blockIndex}.image.source.base64`;
      if (source.data.length > providerBMaxImageBase64)
        return `${path}: image exceeds 5 MB maximum: ${source.data.length} bytes > ${providerBMaxImageBase64} bytes`;
      const size = pngSize(Buffer.from(source.data.slice(0, 32), "base64"));
      if (size && Math.max(size.width, size.height) > providerBMaxImageSide)
        return `${path}.data: At least one of the image dimensions exceed max allowed size: ${providerBMaxImageSide} pixels`;
    }
  }
  return null;
}

/** Provider B's most PDF pages in one request (100 on a model with a 200k-token context window). */
const providerBMaxPdfPages = 600;

/**
 * Provider B: a PDF document of more pages than it reads (recorded with the 100-page limit of a
 * 200k-context model: "messages.38.content.0.pdf.source.base64.data: A maximum of 100 PDF pages may
 * be provided."). The fake counts the uncompressed page objects (`/Type /Page`).
 */
export function providerBPdfRefusal(messages: unknown): string | null {
  if (!Array.isArray(messages)) return null;
  for (const [messageIndex, message] of messages.entries()) {
    const content = (message as { content?: unknown }).content;
    if (!Array.isArray(content)) continue;
    for (const [blockIndex, block] of content.entries()) {
      const source = (block as { source?: { media_type?: string; data?: unknown } }).source;
      if (source?.media_type !== "application/pdf" || typeof source.data !== "string") continue;
      const text = Buffer.from(source.data, "base64").toString("latin1");
      const pages = text.match(/\/Type\s*\/Page(?![a-zA-Z])/g)?.length ?? 0;
      if (pages > providerBMaxPdfPages)
        return `messages.${messageIndex}.content.${blockIndex}.pdf.source.base64.data: A maximum of ${providerBMaxPdfPages} PDF pages may be provided.`;
    }
  }
  return null;
}

function pngSize(bytes: Buffer): { width: number; height: number } | null {
  if (bytes.length < 24 || bytes.toString("latin1", 12, 16) !== "IHDR") return null;
  return { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) };
}
