/** Whether an HTTP status is a success (2xx): a provider that answered so billed the call. */
export const isSuccessStatus = (status: number | undefined): status is number =>
  status !== undefined && status >= 200 && status < 300;
