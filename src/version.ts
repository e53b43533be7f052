/** The gateway's version; a test keeps it equal to package.json's. */
export const version = "0.1.0";
